# 002_statement_timeout.pl - statement_timeout = 200 ms on a long generation
# fails with 57014 promptly, and its request slot is free within a second
# (and the same for opus.request_timeout = 200 ms):
# afterwards opus.max_requests concurrent calls all get a slot and succeed,
# quickly (the engine is not still busy with the abandoned request).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $max_requests = 4;
my $node = opus_node('timeout', conf => "opus.max_requests = $max_requests\n");
my $engine = engine_pid($node);

# Baseline: how long a short call takes on an idle engine.
my $t0 = time;
my ($rc, $out, $err) = psql_state($node, short_sql());
my $short_time = time - $t0;
is($rc, 0, 'short call succeeds') or diag($err);

my $q = start_query($node, long_sql(),
	setup => "SET statement_timeout = 200");
wait_query($q, 120);
my $elapsed = $q->{t_end} - $q->{t0};
is($q->{sqlstate}, '57014', 'long generation cancelled with 57014')
  or diag($q->{err});
like($q->{err}, qr/statement timeout/, 'message says statement timeout');
cmp_ok($elapsed, '<', 20,
	sprintf('cancelled promptly (%.2f s after start)', $elapsed));

# The slot is free within a second.
my $t_free = poll_until(60, sub { active_requests($node) == 0 });
ok(defined $t_free, 'no request slot busy and none in the engine after the call ends');

# opus.request_timeout ends a request the same way.
$q = start_query($node, long_sql(), setup => 'SET opus.request_timeout = 200');
wait_query($q, 120);
$elapsed = $q->{t_end} - $q->{t0};
is($q->{sqlstate}, '57014', 'opus.request_timeout: 57014') or diag($q->{err});
like($q->{err}, qr/opus\.request_timeout/, 'message names opus.request_timeout');
cmp_ok($elapsed, '<', 20,
	sprintf('cancelled promptly (%.2f s after start)', $elapsed));
ok(defined poll_until(60, sub { active_requests($node) == 0 }),
	'no request slot busy and none in the engine after the call ends');

# Every slot usable at once: max_requests concurrent calls all succeed.
my @qs;
push @qs, start_query($node, short_sql()) for 1 .. $max_requests;
my $ok = 0;
for my $c (@qs)
{
	wait_query($c, 60);
	$ok++ if $c->{rc} eq '0' && $c->{out} eq 't';
	diag($c->{err}) if $c->{rc} ne '0';
}
is($ok, $max_requests, "$max_requests concurrent calls all succeed");

is(engine_pid($node), $engine, 'engine still the same process');
no_server_crash_ok($node);
$node->stop;
done_testing();
