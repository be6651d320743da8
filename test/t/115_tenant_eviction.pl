# 115_tenant_eviction.pl - one role flooding the prefix cache does not
# evict another role's cached prefix below an equal share.
#
# The KV cache is 4 MB (11 blocks of 16 tokens).  Role alice runs a prompt
# whose first 48 tokens fill three blocks; role bob then runs eight
# unrelated prompts of two blocks and more, more than the pool holds, so
# blocks must be evicted.  Eviction takes the least recently used block of the
# scope holding the most cached blocks (src/engine/model/kv.c): bob's own,
# so alice's repeat still reports cached_tokens (plain LRU over the whole
# pool evicted hers first: 0).  The control: alice's own flood does evict
# her prompt (least recently used within a scope), so the pool really is
# too small to keep everything.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = opus_node('tenant_eviction', conf => "opus.kv_cache_size = 4MB\n");
$node->safe_psql('postgres', q{CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN;});
is($node->safe_psql('postgres', 'SELECT kv_blocks_total FROM pg_stat_opus_engine'), 11,
	'the pool has 11 blocks');

my $words = 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen '
  . 'fifteen sixteen seventeen eighteen nineteen twenty';

# cached_tokens of one greedy one-token call as $role
sub cached
{
	my ($role, $prompt) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT r -> 'usage' -> 'prompt_tokens_details' ->> 'cached_tokens'
		  FROM opus_completion('$prompt', max_tokens => 1, temperature => 0) AS r;
	}, extra_params => [ '-U', $role ]);
}

# $role runs eight prompts that share no block with anything else
sub flood
{
	my ($role) = @_;
	cached($role, "Flood $_ of $role, unrelated to the rest. Count on: $words") for 1 .. 8;
}

my $memo = "Standing instructions of Alice for the quarterly board summary. Count on: $words, "
  . "and once more: $words";
my $n = $node->safe_psql('postgres', "SELECT cardinality(opus_tokenize('$memo'))");
cmp_ok($n, '>', 48, "alice's prompt fills three blocks ($n tokens)");
$n = $node->safe_psql('postgres',
	"SELECT cardinality(opus_tokenize('Flood 8 of alice, unrelated to the rest. Count on: $words'))");
cmp_ok($n, '>', 32, "a flood prompt fills at least two blocks ($n tokens)");
is(cached('alice', $memo), 0, 'alice: first run misses');
my $c = cached('alice', $memo);
cmp_ok($c, '>=', 48, "alice: a repeat hits ($c tokens)");

flood('bob');
$c = cached('alice', $memo);
cmp_ok($c, '>=', 48, "bob's flood left alice's prefix cached ($c tokens)");
cmp_ok($node->safe_psql('postgres', 'SELECT kv_blocks_cached FROM pg_stat_opus_engine'),
	'<=', 11, 'the cache stays within the pool');

# control: the same flood from alice's own scope evicts her prompt
flood('alice');
is(cached('alice', $memo), 0, "alice's own flood evicts her prompt (the pool is too small)");

no_server_crash_ok($node);
$node->stop;
done_testing();
