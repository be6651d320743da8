# 140_stream.pl - streaming read by a real client (test/tools/stream_client.c,
# libpq single-row mode), which records when each row arrives.
#
#  - chunks arrive while the request runs: the first well before the last;
#  - their concatenation is opus_generate's text for the same seed;
#  - a client that stops after 3 chunks (cancel) and a cursor closed after 3
#    rows give the request up: slot free, request logged as cancelled;
#  - kill -9 of the engine mid-stream ends the set with 58000 after the rows
#    already sent; pg_terminate_backend of a streaming session frees its slot.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;

# Build the client against the installed libpq.
my $repo = "$FindBin::RealBin/../..";
my $client = "${PostgreSQL::Test::Utils::tmp_check}/stream_client";
my $incdir = `pg_config --includedir`;
chomp $incdir;
my $libdir = `pg_config --libdir`;
chomp $libdir;
system('cc', '-O2', '-Wall', "-I$incdir", "$repo/test/tools/stream_client.c",
	"-L$libdir", '-lpq', '-o', $client) == 0
  or BAIL_OUT('cannot build test/tools/stream_client.c (libpq-dev missing?)');

my $node = opus_node('stream');
my $conn = $node->connstr('postgres');

# run_client(SQL, MAX_ROWS) - rows [[ms, text], ...] and the last line.
sub run_client
{
	my ($sql, $max) = @_;
	my ($out, $err) = ('', '');
	my @cmd = ($client, $conn, $sql);
	push @cmd, $max if defined $max;
	IPC::Run::run(\@cmd, '<', '/dev/null', '>', \$out, '2>', \$err,
		IPC::Run::timeout(120));
	return parse_client($out);
}

sub unescape
{
	my ($s) = @_;
	$s =~ s/\\(.)/$1 eq 'n' ? "\n" : $1 eq 't' ? "\t" : $1 eq 'r' ? "\r" : $1/ge;
	return $s;
}

sub parse_client
{
	my ($out) = @_;
	my (@rows, $last);
	for my $line (split /\n/, $out)
	{
		if ($line =~ /^ROW (\S+) (.*)$/s) { push @rows, [ $1, unescape($2) ]; }
		elsif ($line =~ /^ROW (\S+)$/) { push @rows, [ $1, '' ]; }
		else { $last = $line; }
	}
	return (\@rows, $last // '');
}

sub busy_slots
{
	return $node->safe_psql('postgres', 'SELECT busy_slots FROM opus_engine');
}

sub last_status
{
	return $node->safe_psql('postgres',
		'SELECT status FROM opus_requests ORDER BY id DESC LIMIT 1');
}

# 1. Chunks arrive while the request runs and add up to opus_generate's text.
my $opts = "max_tokens => 48, temperature => 0.7, seed => 7";
my $prompt = "'Once upon a time, in a small village by the sea,'";
my ($rows, $last) =
  run_client("SELECT opus_generate_stream($prompt, $opts)");
is($last, 'OK ' . scalar(@$rows), 'stream ended normally');
cmp_ok(scalar(@$rows), '>=', 10, 'many chunks (' . scalar(@$rows) . ')');
my ($first_ms, $last_ms) = ($rows->[0][0], $rows->[-1][0]);
cmp_ok($first_ms, '<', 0.4 * $last_ms,
	sprintf('first chunk (%.1f ms) well before the last (%.1f ms)', $first_ms, $last_ms));
my $streamed = join('', map { $_->[1] } @$rows);
my $whole = $node->safe_psql('postgres',
	"SELECT opus_generate($prompt, $opts) || '|'");
$whole =~ s/\|$//;
is($streamed, $whole, 'chunks concatenate to opus_generate\'s text (same seed)');

# Chat completion chunks: the last one says how it ended.
($rows, $last) = run_client(
	"SELECT opus_chat_stream_completion('[{\"role\": \"user\", \"content\": \"Say hi.\"}]', max_tokens => 8, temperature => 0)");
like($rows->[-1][1], qr/"finish_reason": "length"/, 'last chunk has finish_reason');
like($rows->[-1][1], qr/"completion_tokens": 8/, 'last chunk has usage');
unlike($rows->[0][1], qr/"usage"/, 'first chunk has no usage');

# 2. A client that stops reading after 3 chunks (and cancels).
($rows, $last) = run_client(
	"SELECT opus_generate_stream('Count from 1 to 10000: 1, 2, 3,', max_tokens => 1500, temperature => 0)",
	3);
is($last, 'CANCELLED ' . scalar(@$rows), 'client cancelled the stream');
ok(defined poll_until(120, sub { busy_slots() == 0 }), 'slot freed after the cancel');
ok(defined poll_until(120, sub { last_status() eq 'cancelled' }),
	'request logged as cancelled');

# A cursor closed after 3 rows.
my $t0 = time;
my $cur = $node->safe_psql('postgres', q{
BEGIN;
DECLARE c CURSOR FOR SELECT opus_generate_stream('Count from 1 to 10000: 1, 2, 3,', max_tokens => 1500, temperature => 0);
FETCH 3 FROM c;
CLOSE c;
COMMIT;
});
is(scalar(split /\n/, $cur), 3, 'FETCH 3 returned 3 rows');
ok(defined poll_until(120, sub { busy_slots() == 0 }), 'slot freed after CLOSE');
ok(defined poll_until(120, sub { last_status() eq 'cancelled' }),
	'closed cursor logged as cancelled');
my $completed = $node->safe_psql('postgres',
	'SELECT completion_tokens FROM opus_requests ORDER BY id DESC LIMIT 1');
cmp_ok($completed || 0, '<', 1500, "generation stopped early ($completed tokens)");

# 3. kill -9 of the engine mid-stream: rows, then 58000.
{
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ $client, $conn,
		  "SELECT opus_generate_stream('Count from 1 to 10000: 1, 2, 3,', max_tokens => 1500, temperature => 0)" ],
		'<', '/dev/null', '>', \$out, '2>', \$err, IPC::Run::timeout(120));
	poll_until(30, sub { $h->pump_nb; ($out =~ tr/\n//) >= 5 });
	my $engine = engine_pid($node);
	ok(kill('KILL', $engine), 'engine killed mid-stream');
	$h->finish;
	my ($r, $l) = parse_client($out);
	cmp_ok(scalar(@$r), '>=', 5, 'rows sent before the kill were received');
	like($l, qr/^ERROR 58000 /, 'the set ended with 58000') or diag($out);
	wait_engine_ready($node);
	ok(defined poll_until(120, sub { busy_slots() == 0 }), 'no slot left busy after the kill');
}

# 4. pg_terminate_backend of a streaming session.
{
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ $client, $conn,
		  "SELECT opus_generate_stream('Count from 1 to 10000: 1, 2, 3,', max_tokens => 1500, temperature => 0)" ],
		'<', '/dev/null', '>', \$out, '2>', \$err, IPC::Run::timeout(120));
	poll_until(30, sub { $h->pump_nb; ($out =~ tr/\n//) >= 3 });
	my $n = $node->safe_psql('postgres',
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'SELECT opus_generate_stream%' AND pid <> pg_backend_pid()");
	is($n, '1', 'streaming backend terminated');
	$h->finish;
	ok(defined poll_until(120, sub { busy_slots() == 0 }), 'slot freed after pg_terminate_backend');
	ok(defined poll_until(120, sub { last_status() eq 'cancelled' }),
		'terminated stream logged as cancelled');
}

no_server_crash_ok($node);
$node->stop;
done_testing();
