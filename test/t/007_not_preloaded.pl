# 007_not_preloaded.pl - without shared_preload_libraries, CREATE EXTENSION
# still works and the generation functions fail with 55000 and a hint that
# says what to set.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = opus_node('nopreload', preload => 0);

for my $sql (
	"SELECT opus_generate('Hello', max_tokens => 2)",
	q{SELECT opus_chat('[{"role":"user","content":"Hi"}]'::jsonb, max_tokens => 2)})
{
	my ($rc, $out, $err, $state) = psql_state($node, $sql, 30);
	is($state, '55000', "55000 without preloading: $sql") or diag($err);
	like($err, qr/HINT:.*shared_preload_libraries/, 'hint names shared_preload_libraries');
}

is($node->safe_psql('postgres', 'SELECT 1'), '1', 'server fine');
$node->stop;
done_testing();
