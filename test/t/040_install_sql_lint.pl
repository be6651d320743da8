# 040_install_sql_lint.pl - static checks of the install script parts
# (sql/install/*.sql), the update script parts (sql/update/A--B/*.sql) and
# the released install scripts (sql/released/*.sql), no server needed:
#
#  - a released install script is never changed (sql/released/SHA256SUMS);
#  - an update script drops no table (a table holds data: change it with
#    ALTER TABLE) and nothing with CASCADE;
#  - nothing is CREATE OR REPLACE'd (an object someone else created first
#    would be taken over) and every created object is @extschema@-qualified;
#  - no SECURITY DEFINER function without SET search_path;
#  - in the bodies of LANGUAGE sql / plpgsql functions and procedures, which
#    are parsed at call time under the caller's search_path, every operator
#    is written OPERATOR(pg_catalog.op), and the constructs that look up an
#    operator by name (IN (...), LIKE, BETWEEN, IS DISTINCT FROM, NULLIF)
#    are not used: a hostile operator earlier in search_path, or one that
#    matches the argument types better than pg_catalog's, would run
#    instead.  Dynamic SQL inside string literals is not checked here (the
#    pg_regress test `security` exercises it against planted operators).
#
# Allowed: := and => (assignment, named arguments), SET col = ... of
# UPDATE, GET DIAGNOSTICS x = ..., RAISE ... USING opt = ..., SELECT * /
# count(*) / x.*, %TYPE / %ROWTYPE, FOR x IN ... loops.
use strict;
use warnings;
use Test::More;

my @files = sort glob('sql/install/*.sql');
ok(@files > 0, 'install script parts found') or BAIL_OUT('run from the repository root');
my @update_files = sort glob('sql/update/*/*.sql');
my @released = sort glob('sql/released/*.sql');
ok(@released > 0, 'released install scripts found');
push @files, @update_files, @released;

# Released scripts are frozen: databases out there were made by them.
{
	open(my $fh, '<', 'sql/released/SHA256SUMS') or die "sql/released/SHA256SUMS: $!";
	my %want = map { my ($h, $f) = split ' '; ($f => $h) } grep { /\S/ } <$fh>;
	close $fh;
	for my $f (@released)
	{
		(my $base = $f) =~ s{.*/}{};
		my $got = (split ' ', `sha256sum '$f'`)[0];
		is($got, $want{$base} // 'missing from SHA256SUMS', "$f is unchanged since its release");
	}
}

# Blank comments and string literals (keeping line breaks), so positions and
# line numbers survive.
sub strip
{
	my ($s) = @_;
	my $out = '';
	my $i = 0;
	my $n = length $s;
	while ($i < $n)
	{
		my $c = substr($s, $i, 1);
		my $two = substr($s, $i, 2);
		if ($two eq '--')
		{
			my $e = index($s, "\n", $i);
			$e = $n if $e < 0;
			$out .= ' ' x ($e - $i);
			$i = $e;
		}
		elsif ($two eq '/*')
		{
			my $e = index($s, '*/', $i + 2);
			$e = $e < 0 ? $n : $e + 2;
			(my $blank = substr($s, $i, $e - $i)) =~ s/[^\n]/ /g;
			$out .= $blank;
			$i = $e;
		}
		elsif ($c eq "'")
		{
			my $j = $i + 1;
			while ($j < $n)
			{
				if (substr($s, $j, 1) eq "'")
				{
					if (substr($s, $j + 1, 1) eq "'") { $j += 2; next; }
					last;
				}
				$j++ if substr($s, $j, 1) eq '\\' && substr($s, $i - 1, 1) =~ /[eE]/;
				$j++;
			}
			(my $blank = substr($s, $i, $j + 1 - $i)) =~ s/[^\n]/ /g;
			$out .= "'" . substr($blank, 1, -1) . "'";
			$i = $j + 1;
		}
		elsif (substr($s, $i) =~ /^(\$(?:[A-Za-z_]\w*)?\$)/)
		{
			# a dollar-quoted string (dynamic SQL inside a body)
			my $tag = $1;
			my $e = index($s, $tag, $i + length $tag);
			$e = $e < 0 ? $n : $e + length $tag;
			(my $blank = substr($s, $i, $e - $i)) =~ s/[^\n]/ /g;
			$out .= $blank;
			$i = $e;
		}
		elsif ($c eq '"')
		{
			my $e = index($s, '"', $i + 1);
			$e = $n - 1 if $e < 0;
			$out .= '"' . ('x' x ($e - $i - 1)) . '"';
			$i = $e + 1;
		}
		else
		{
			$out .= $c;
			$i++;
		}
	}
	return $out;
}

# In every SET list (UPDATE ... SET, ON CONFLICT DO UPDATE SET), blank the
# '=' of each assignment: at parenthesis depth 0, after SET or a comma, a
# column (or a parenthesised column list) followed by '='.  The list ends at
# FROM, WHERE or RETURNING at depth 0, at ';', or when its parenthesis closes.
sub blank_set_lists
{
	my ($s) = @_;
	while ($s =~ /\bSET\b/gi)
	{
		my $i = pos($s);
		my $depth = 0;
		my $expect = 1;    # at the start of an assignment
		while ($i < length $s)
		{
			my $rest = substr($s, $i);
			if ($depth == 0 && $expect && $rest =~ /^(\s*(?:[\w."]+|\([\w.",\s]+\))\s*)=/)
			{
				substr($s, $i + length($1), 1) = ' ';
				$i += length($1) + 1;
				$expect = 0;
				next;
			}
			my $c = substr($s, $i, 1);
			if ($c eq '(') { $depth++; }
			elsif ($c eq ')') { last if $depth == 0; $depth--; }
			elsif ($c eq ';') { last; }
			elsif ($c eq ',' && $depth == 0) { $expect = 1; $i++; next; }
			elsif ($depth == 0 && $rest =~ /^\b(?:FROM|WHERE|RETURNING)\b/i && substr($s, $i - 1, 1) =~ /\W/) { last; }
			$i++;
		}
		pos($s) = $i;
	}
	return $s;
}

# check($name, $text): the problems found in one script part
sub check
{
	my ($f, $src) = @_;
	my @problems;

	# Function bodies: AS $tag$ ... $tag$ of LANGUAGE sql / plpgsql objects.
	# Find them on the raw text first (dollar quotes are not strings to strip).
	my @bodies;
	while ($src =~ /(\$(\w*)\$)(.*?)\1/sg)
	{
		push @bodies, [ $-[3], $3 ];
	}
	# Blank the bodies in a copy for the script-level checks.
	my $outer = $src;
	substr($outer, $_->[0], length $_->[1]) = ' ' x length $_->[1] for @bodies;
	$outer = strip($outer);
	my $lineof = sub { my ($pos) = @_; return 1 + (() = substr($src, 0, $pos) =~ /\n/g); };

	if ($f =~ m{(?:^|/)update/})
	{
		while ($outer =~ /\bDROP\s+TABLE\b/gi)
		{
			push @problems, "$f:" . $lineof->($-[0]) . ": DROP TABLE in an update script (tables hold data: ALTER them)";
		}
		while ($outer =~ /\bDROP\b[^;]*\bCASCADE\b/gi)
		{
			push @problems, "$f:" . $lineof->($-[0]) . ": DROP ... CASCADE in an update script (drop each dependent by name)";
		}
	}
	while ($outer =~ /\bCREATE\s+OR\s+REPLACE\b/gi)
	{
		push @problems, "$f:" . $lineof->($-[0]) . ": CREATE OR REPLACE";
	}
	while ($outer =~ /\bCREATE\s+(?:UNIQUE\s+)?(FUNCTION|PROCEDURE|VIEW|TABLE|TYPE|DOMAIN|OPERATOR|AGGREGATE|SEQUENCE)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\S+)/gi)
	{
		push @problems, "$f:" . $lineof->($-[0]) . ": CREATE $1 $2 is not \@extschema\@-qualified"
		  unless $2 =~ /^\@extschema\@\./;
	}
	# SECURITY DEFINER needs SET search_path in the same CREATE statement.
	for my $stmt (split /;\s*\n/, $outer)
	{
		next unless $stmt =~ /\bSECURITY\s+DEFINER\b/i;
		push @problems, "$f: SECURITY DEFINER without SET search_path near: " . substr($stmt =~ s/\s+/ /gr, 0, 80)
		  unless $stmt =~ /\bSET\s+search_path\b/i;
	}

	for my $b (@bodies)
	{
		my ($start, $body) = @$b;
		my $s = strip($body);
		# allowed constructs, blanked
		$s =~ s/OPERATOR\s*\(\s*pg_catalog\s*\.\s*[^)\s]+\s*\)/ /g;
		$s =~ s/:=|=>|::/  /g;
		$s =~ s/\bSELECT\s+\*/SELECT  /gi;
		$s =~ s/\(\s*\*\s*\)/()/g;
		$s =~ s/\.\*/. /g;
		$s =~ s/%(?:ROW)?TYPE\b/ TYPE/gi;
		$s =~ s/\bGET\s+(?:STACKED\s+)?DIAGNOSTICS\b[^;]*/ /gi;
		$s =~ s/\bUSING\s+(?:ERRCODE|HINT|DETAIL|MESSAGE|COLUMN|CONSTRAINT|DATATYPE|TABLE|SCHEMA)\s*=[^;]*/ /gi;
		# UPDATE ... SET a = ..., (b, c) = ...: blank the assignment '='s
		$s = blank_set_lists($s);
		$s =~ s/\bFOR(?:EACH)?\s+[\w, ]+\s+IN\b/FOR x   /gi;
		$s =~ s/\[[^\]\[]*\]/ /g;    # array subscripts and slices
		$s =~ s/(?<![\w.])-(?=\d)/ /g;    # negative literals
		my @l = split /\n/, $s, -1;
		my $base = $lineof->($start);
		for my $i (0 .. $#l)
		{
			my $line = $l[$i];
			my @hits;
			push @hits, "bare operator '$1'"
			  while $line =~ /(<>|!=|<=|>=|\|\||->>|->|#>>|#>|\@>|<\@|\?\||\?&|!~\*|!~|~\*|~~|[=<>+\-*\/%?~])/g;
			push @hits, "'$1' looks up an operator by name"
			  while $line =~ /\b((?:NOT\s+)?IN\s*\(|LIKE|ILIKE|SIMILAR\s+TO|BETWEEN|IS\s+(?:NOT\s+)?DISTINCT\s+FROM|NULLIF)/gi;
			push @problems, "$f:" . ($base + $i) . ": $_: " . ($line =~ s/^\s+|\s+$//gr) for @hits;
		}
	}
	return @problems;
}

# The checks can fail: a script part with one of each mistake.
my $bad = <<'BAD';
CREATE OR REPLACE FUNCTION @extschema@.f1() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;
CREATE FUNCTION f2() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;
CREATE FUNCTION @extschema@.f3(a int) RETURNS boolean LANGUAGE sql SECURITY DEFINER
AS $$ SELECT a OPERATOR(pg_catalog.=) 1 $$;
CREATE FUNCTION @extschema@.f4(a int, b text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    x int := a;          -- comment with = and || is fine
BEGIN
    UPDATE t SET c = 1, (d, e) = (SELECT 1, 2) WHERE c = a;
    IF b IN ('x', 'y') OR b LIKE 'z%' THEN
        RETURN NULLIF(a, 0) IS NULL;
    END IF;
    RETURN 'a = b' OPERATOR(pg_catalog.=) b || 'c';
END $$;
BAD
my @bad = check('bad.sql', $bad);
my @want = (qr/bad\.sql:1: CREATE OR REPLACE/, qr/CREATE FUNCTION f2\(\) is not/,
	qr/SECURITY DEFINER without SET search_path/, qr/bad\.sql:9: bare operator '=': .*WHERE c   a|bad\.sql:9: bare operator '='/,
	qr/bad\.sql:10: 'IN \(' looks up/, qr/bad\.sql:10: 'LIKE' looks up/, qr/bad\.sql:11: 'NULLIF' looks up/,
	qr/bad\.sql:13: bare operator '\|\|'/);
for my $w (@want)
{
	ok((grep { $_ =~ $w } @bad), "a planted mistake is found: $w") or diag(join("\n", @bad));
}
is(scalar(@bad), scalar(@want), 'nothing else is reported in the planted script') or diag(join("\n", @bad));

my $bad_update = <<'BAD';
ALTER TABLE @extschema@.opus_job ADD COLUMN x integer;
DROP TABLE @extschema@.opus_requests;
DROP FUNCTION @extschema@.f(integer) CASCADE;
CREATE OR REPLACE VIEW @extschema@.v AS SELECT 1;
BAD
my @bad_u = check('sql/update/0.1.0--0.2.0/99_bad.sql', $bad_update);
my @want_u = (qr/:2: DROP TABLE in an update script/, qr/:3: DROP \.\.\. CASCADE/, qr/:4: CREATE OR REPLACE/);
for my $w (@want_u)
{
	ok((grep { $_ =~ $w } @bad_u), "a planted update mistake is found: $w") or diag(join("\n", @bad_u));
}
is(scalar(@bad_u), scalar(@want_u), 'nothing else is reported in the planted update script') or diag(join("\n", @bad_u));

my @problems;
for my $f (@files)
{
	open(my $fh, '<', $f) or die "$f: $!";
	local $/;
	my $src = <$fh>;
	close $fh;
	push @problems, check($f, $src);
}

is(scalar(@problems), 0, 'install and update scripts: qualified, nothing replaced, operators schema-qualified in function bodies')
  or diag(join("\n", @problems));

done_testing();
