# 113_tenant_shedding.pl - load shedding by objective: while a batch request
# has waited longer than opus.queue_objective for its first token, new
# requests of the batch class and later ones are refused at once with 53000,
# interactive ones still queue; once it is served, batch requests are
# accepted again.  (The engine is paused with SIGSTOP to make the wait.)
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = opus_node('tenant_shed', conf => "opus.queue_objective = 300ms\n");
my $submit = "SELECT opus_submit('Hello there', max_tokens => 2, temperature => 0, detached => true)";
my $pid = engine_pid($node);
ok($pid, 'engine running');

kill 'STOP', $pid;
my $first = $node->safe_psql('postgres', "SET opus.priority = 'batch'; $submit");
ok($first > 0, 'a batch request is queued while the engine is paused');
usleep(600_000);

my $t0 = time;
my ($rc, $out, $err, $state) = psql_state($node, "SET opus.priority = 'batch'; $submit", 120);
my $dt = time - $t0;
is($state, '53000', 'past the objective, a new batch request is refused with 53000') or diag($err);
cmp_ok($dt, '<', 30, sprintf('without waiting (the engine is paused) (%.2f s)', $dt));
like($err, qr/has waited \d+ ms for its first token, over opus.queue_objective \(300 ms\)/,
	'the DETAIL names the objective');
($rc, $out, $err, $state) = psql_state($node, "SET opus.priority = 20; $submit", 120);
is($state, '53000', 'and so is a later class');
($rc, $out, $err, $state) = psql_state($node, $submit, 10);
is($rc, 0, 'an interactive request still queues') or diag($err);
kill 'CONT', $pid;

ok(defined poll_until(30, sub { $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_opus_activity WHERE state IN ('queued', 'prefill', 'decode')") eq '0' }),
	'the queue drains');
($rc, $out, $err) = psql_state($node, "SET opus.priority = 'batch'; $submit", 30);
is($rc, 0, 'batch requests are accepted again') or diag($err);

no_server_crash_ok($node);
$node->stop;
done_testing();
