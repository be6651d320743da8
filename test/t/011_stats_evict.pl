# 011_stats_evict.pl - pg_stat_opus keeps at most opus.stat_max_entries
# entries; a new one evicts the least-used 5% (at least one), counted in
# pg_stat_opus_engine.stat_evictions.  Requests rejected before queuing
# (too large for a slot) make cheap entries: they never reach the engine.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = opus_node('stats_evict', conf => "opus.stat_max_entries = 10\n");

$node->safe_psql('postgres', q{
	SELECT pg_stat_opus_reset();
	DO $$ BEGIN
		FOR i IN 1..12 LOOP
			EXECUTE format('CREATE ROLE regress_evict_%s', i);
		END LOOP;
	END $$;
});

# regress_evict_1 is the busiest (3 requests); 2..12 make one each.
my $reject = q{
	DO $$ BEGIN
		FOR i IN 1..12 LOOP
			FOR j IN 1..CASE WHEN i = 1 THEN 3 ELSE 1 END LOOP
				EXECUTE format('SET ROLE regress_evict_%s', i);
				BEGIN
					PERFORM opus_generate(repeat('a', 600000));
				EXCEPTION WHEN program_limit_exceeded THEN NULL;
				END;
				RESET ROLE;
			END LOOP;
		END LOOP;
	END $$;
};
$node->safe_psql('postgres', "SET opus.max_prompt_bytes = '1MB'; $reject");

is($node->safe_psql('postgres', 'SELECT stat_entries, stat_evictions FROM pg_stat_opus_engine'),
	'10|2', 'ten entries kept, two evicted');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_stat_opus'), '10', 'the view has ten rows');
is($node->safe_psql('postgres',
		q{SELECT rejections FROM pg_stat_opus WHERE userid = 'regress_evict_1'::regrole}),
	'3', 'the most-used entry survives with its counts');
is($node->safe_psql('postgres',
		q{SELECT sum(rejections) FROM pg_stat_opus}),
	'12', 'the survivors: 3 + 9 x 1 rejections');
is($node->safe_psql('postgres',
		q{SELECT pg_stat_opus_reset() IS NOT NULL;
		  SELECT stat_entries || '|' || stat_evictions FROM pg_stat_opus_engine}),
	"t\n0|0", 'reset empties the entries and the eviction count');

$node->stop;
done_testing();
