# OpusTest.pm - shared helpers for the opus_pg TAP tests (test/t/*.pl).
#
# A node is a PostgreSQL::Test::Cluster with opus_pg preloaded and the
# extension created.  Queries that must run concurrently with the test (a long
# generation to kill or cancel) are plain psql processes under IPC::Run, so a
# test can watch them finish and time their errors.  Every wait here is
# bounded; nothing can hang the run.

package OpusTest;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run ();
use Time::HiRes qw(time usleep);
use Test::More;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

our @EXPORT = qw(
  opus_node wait_engine_ready engine_pid postmaster_pid descendants
  start_query wait_query query_running psql_state sqlstate_of
  poll_until count_log_matches long_sql short_sql active_requests
  generating_backends wait_generating start_time log_offset
  no_server_crash_ok engine_info
  $LONG_TOKENS);

# Tokens asked of a "long" generation: far more than any timeout in these
# tests lets finish.  The prompt invites an endless continuation, and
# greedy decoding keeps it going.
our $LONG_TOKENS = 1500;

sub long_sql
{
	my (%o) = @_;
	my $tokens = $o{max_tokens} // $LONG_TOKENS;
	return "SELECT length(opus_generate("
	  . "'Count from 1 to 10000, separated by commas: 1, 2, 3, 4, 5,', "
	  . "max_tokens => $tokens, temperature => 0))";
}

sub short_sql
{
	return "SELECT length(opus_generate('Hello', max_tokens => 2, temperature => 0)) >= 0";
}

# opus_node(NAME, conf => "extra postgresql.conf lines", preload => 0|1,
#           create => 0|1, ready => 0|1)
# A started node with opus_pg (by default) preloaded, the extension created
# in database postgres and the engine answering.
sub opus_node
{
	my ($name, %o) = @_;
	my $preload = $o{preload} // 1;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	my $conf = "log_min_messages = info\n"
	  . "log_statement = none\n"
	  . "opus.threads = 2\n";
	$conf .= "shared_preload_libraries = 'opus_pg'\n" if $preload;
	# A development engine binary instead of the installed one.
	$conf .= "opus.engine_path = '$ENV{OPUS_ENGINE_PATH}'\n"
	  if $ENV{OPUS_ENGINE_PATH};
	$conf .= $o{conf} if defined $o{conf};
	$node->append_conf('postgresql.conf', $conf);
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION opus_pg')
	  if $o{create} // 1;
	wait_engine_ready($node) if $preload && ($o{ready} // 1);
	return $node;
}

# wait_engine_ready(NODE, TIMEOUT=90) - until a one-token generation succeeds.
sub wait_engine_ready
{
	my ($node, $timeout) = @_;
	$timeout //= 90;
	my $t0 = time;
	my $last = '';
	while (time - $t0 < $timeout)
	{
		my ($rc, $out, $err) = psql_state($node, short_sql());
		return 1 if $rc == 0 && $out eq 't';
		$last = $err;
		usleep(200_000);
	}
	die "engine not ready after ${timeout}s: $last";
}

# postmaster_pid(NODE) - from postmaster.pid.
sub postmaster_pid
{
	my ($node) = @_;
	open my $fh, '<', $node->data_dir . '/postmaster.pid' or return undef;
	my $pid = <$fh>;
	close $fh;
	chomp $pid;
	return $pid;
}

# descendants(PID) - list of [pid, args] of every process below PID.
sub descendants
{
	my ($root) = @_;
	my %kids;
	my %args;
	for my $line (`ps -e -o pid=,ppid=,args=`)
	{
		next unless $line =~ /^\s*(\d+)\s+(\d+)\s+(.*)$/;
		push @{ $kids{$2} }, $1;
		$args{$1} = $3;
	}
	my @out;
	my @todo = ($root);
	while (@todo)
	{
		my $p = shift @todo;
		for my $c (@{ $kids{$p} // [] })
		{
			push @out, [ $c, $args{$c} ];
			push @todo, $c;
		}
	}
	return @out;
}

# engine_pid(NODE) - pid of this node's engine process (a descendant of its
# postmaster running the opus_engine binary), or undef.
sub engine_pid
{
	my ($node) = @_;
	my $pm = postmaster_pid($node) or return undef;
	for my $d (descendants($pm))
	{
		return $d->[0] if $d->[1] =~ /opus_engine/ && $d->[1] !~ /^postgres/;
	}
	return undef;
}

# start_query(NODE, SQL, setup => "SET ...", db => DB, user => ROLE) - run SQL in its own
# psql process, in the background (SETUP, if given, runs first in the same
# session), in database DB (default postgres).  Returns a handle for
# query_running and wait_query.
sub start_query
{
	my ($node, $sql, %o) = @_;
	my $q = { out => '', err => '', t0 => time };
	my @cmd = (
		'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1',
		'-v', 'VERBOSITY=verbose',
		'-d', $node->connstr($o{db} // 'postgres')
		  . (defined $o{user} ? " user=$o{user}" : ''));
	push @cmd, '-c', $o{setup} if defined $o{setup};
	push @cmd, '-c', $sql;
	$q->{h} = IPC::Run::start(\@cmd, '<', '/dev/null', '>', \$q->{out},
		'2>', \$q->{err});
	return $q;
}

# query_running(Q) - true while the psql process has not exited.
sub query_running
{
	my ($q) = @_;
	return 0 if exists $q->{rc};
	$q->{h}->pump_nb if $q->{h}->pumpable;
	return 1 if $q->{h}->pumpable;
	$q->{h}->finish;
	$q->{rc} = $q->{h}->result(0) // 0;
	$q->{t_end} = time;
	return 0;
}

# wait_query(Q, TIMEOUT) - wait for the psql process to exit; kills it after
# TIMEOUT seconds.  Returns Q with rc, out, err, sqlstate, t_end filled
# (rc is 'timeout' on timeout).
sub wait_query
{
	my ($q, $timeout) = @_;
	my $deadline = time + $timeout;
	while (query_running($q))
	{
		if (time > $deadline)
		{
			$q->{h}->kill_kill;
			$q->{rc} = 'timeout';
			$q->{t_end} = time;
			last;
		}
		usleep(10_000);
	}
	$q->{sqlstate} = sqlstate_of($q->{err});
	chomp $q->{out};
	return $q;
}

# sqlstate_of(STDERR) - first SQLSTATE of psql's verbose error output.
sub sqlstate_of
{
	my ($err) = @_;
	return $1 if defined $err && $err =~ /(?:ERROR|FATAL):\s+([0-9A-Z]{5}):/;
	return '';
}

# psql_state(NODE, SQL, TIMEOUT=60) - run SQL synchronously; returns
# (rc, stdout, stderr, sqlstate).
sub psql_state
{
	my ($node, $sql, $timeout) = @_;
	my $q = wait_query(start_query($node, $sql), $timeout // 60);
	return ($q->{rc}, $q->{out}, $q->{err}, $q->{sqlstate});
}

# poll_until(TIMEOUT, CODE) - call CODE every 50 ms until it returns true;
# returns the elapsed seconds, or undef on timeout.
sub poll_until
{
	my ($timeout, $code) = @_;
	my $t0 = time;
	while (1)
	{
		return time - $t0 if $code->();
		return undef if time - $t0 > $timeout;
		usleep(50_000);
	}
}

# count_log_matches(NODE, REGEX, FROM_OFFSET=0) - lines of the server log
# after FROM_OFFSET matching REGEX.
sub count_log_matches
{
	my ($node, $re, $from) = @_;
	my $log = slurp_file($node->logfile);
	$log = substr($log, $from // 0);
	my $n = () = $log =~ /$re/mg;
	return $n;
}

# active_requests(NODE) - request slots in use plus requests the engine
# reports in flight (view opus_engine), or -1 if the view cannot be read.
sub active_requests
{
	my ($node) = @_;
	my ($rc, $out) = psql_state($node,
		'SELECT busy_slots + engine_requests FROM opus_engine', 10);
	return $rc eq '0' && $out =~ /^\d+$/ ? $out + 0 : -1;
}

# engine_info(NODE) - hashref of the opus_engine view's row.
sub engine_info
{
	my ($node) = @_;
	my @cols = qw(state engine_pid starts restarts busy_slots
	  engine_requests max_requests tokens_generated last_error);
	my ($rc, $out) = psql_state($node,
		'SELECT ' . join(', ', @cols) . ' FROM opus_engine', 10);
	return {} unless $rc eq '0';
	my @v = split /\|/, $out, scalar(@cols);
	my %h;
	@h{@cols} = @v;
	return \%h;
}

# generating_backends(NODE) - pids of other backends now running a
# statement that calls opus_generate.
sub generating_backends
{
	my ($node) = @_;
	my ($rc, $out) = psql_state(
		$node,
		"SELECT pid FROM pg_stat_activity WHERE state = 'active' "
		  . "AND query LIKE '%opus_generate(%' AND pid <> pg_backend_pid() "
		  . "ORDER BY backend_start",
		10);
	return () unless $rc eq '0';
	return grep { /^\d+$/ } split /\n/, $out;
}

# wait_generating(NODE, N, TIMEOUT=60) - until N backends are in
# opus_generate; returns their pids (dies on timeout).
sub wait_generating
{
	my ($node, $n, $timeout) = @_;
	my @pids;
	my $ok = poll_until($timeout // 60,
		sub { @pids = generating_backends($node); @pids >= $n });
	die "expected $n generating backends, saw " . scalar(@pids)
	  unless defined $ok;
	return @pids;
}

# start_time(NODE) - pg_postmaster_start_time() as text.
sub start_time
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
}

# log_offset(NODE) - current size of the server log (for count_log_matches).
sub log_offset
{
	my ($node) = @_;
	return -s $node->logfile;
}

# no_server_crash_ok(NODE) - the server log shows no crashed PostgreSQL
# process and no crash-restart cycle.
sub no_server_crash_ok
{
	my ($node) = @_;
	my $log = slurp_file($node->logfile);
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	unlike(
		$log,
		qr/\(PID \d+\) was terminated by signal|terminating any other active server processes|all server processes terminated/,
		'no PostgreSQL process crashed');
}

1;
