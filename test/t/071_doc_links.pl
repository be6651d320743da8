# 071_doc_links.pl - every relative link in README.md, CHANGELOG.md and
# docs/*.md resolves inside the repository (test/tools/check_doc_links.py:
# files exist, nothing leads outside the tree, #anchors match a heading).
# No server needed.  The checker is first run on a planted tree with one
# of each mistake, so it is known to find them.
use strict;
use warnings;
use File::Temp qw(tempdir);
use Test::More;

my $checker = 'test/tools/check_doc_links.py';
ok(-f $checker, 'the link checker exists') or BAIL_OUT('run from the repository root');

my $dir = tempdir(CLEANUP => 1);
mkdir "$dir/docs";
sub put { my ($f, $t) = @_; open(my $fh, '>', "$dir/$f") or die "$f: $!"; print $fh $t; close $fh; }
put('README.md', <<'MD');
# Title

## Good section

[ok](docs/a.md), [ok anchor](docs/a.md#the-part-two), [self](#good-section), [url](https://example.com/x.md)
[missing](docs/nothing.md) and [outside](../../etc/passwd) and [bad anchor](docs/a.md#nowhere)
`[in code](docs/nothing2.md)`

```
[in a fence](docs/nothing3.md)
```
MD
put('docs/a.md', "# A\n\n## The part: two\n\n[back](../README.md#title) [self bad](#b)\n");
my $out = `python3 $checker $dir 2>&1`;
isnt($? >> 8, 0, 'the planted tree fails');
like($out, qr{README\.md:6: docs/nothing\.md: no such file}, 'a missing file is found');
like($out, qr{README\.md:6: \.\./\.\./etc/passwd: leaves the repository}, 'a link out of the tree is found');
like($out, qr{README\.md:6: docs/a\.md#nowhere: no heading}, 'a missing anchor is found');
like($out, qr{docs/a\.md:5: #b: no heading}, 'a missing anchor in the same file is found');
unlike($out, qr{nothing[23]|the-part-two|#good-section|#title|example\.com}, 'code, fences, URLs and good anchors pass');
like($out, qr/2 files, 8 relative links, 4 broken/, 'the counts');

$out = `python3 $checker 2>&1`;
is($? >> 8, 0, 'every relative link in README.md, CHANGELOG.md and docs/*.md resolves') or diag($out);
note($out);

done_testing();
