# 072_protocol_version.pl - a supervisor and an engine of different protocol
# versions (opus_pg.so and opus_engine from different builds) refuse each
# other at the handshake with an error naming both versions, never garbage.
#
#  1. The engine gets a HELLO of another version (shorter than its own, as a
#     HELLO of another version may be): it answers FATAL naming both
#     versions and exits.
#  2. The supervisor gets a READY of another version from a stand-in engine
#     (opus.engine_path): it kills it and retries with backoff (the server
#     log names both versions), and calls fail with 58000 whose DETAIL names
#     both versions instead of hanging.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use File::Temp qw(tempdir);
use IO::Handle;
use Socket;
use PostgreSQL::Test::Utils;
use Test::More;

my ($proto) = slurp_file("$FindBin::RealBin/../../src/protocol.h") =~ /#define OPUS_PROTO_VERSION\s+(\d+)/;
ok($proto, "this build speaks protocol version $proto");
my $other = $proto + 7;

sub frame
{
	my ($type, $payload) = @_;
	return pack('V v v Q<', length($payload), $type, 0, 0) . $payload;
}

# 1. The engine, given a HELLO of another version.
{
	my $engine = $ENV{OPUS_ENGINE_PATH} || 'opus_engine';
	local $^F = 1000;    # the child's end survives exec
	socketpair(my $mine, my $theirs, AF_UNIX, SOCK_STREAM, 0) or die "socketpair: $!";
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		close $mine;
		exec($engine, 'serve', '--fd', fileno($theirs)) or die "exec $engine: $!";
	}
	close $theirs;
	$mine->autoflush(1);
	print $mine frame(1, pack('V V', 0x5355504F, $other) . ("\0" x 40));
	my $buf = '';
	while (1)
	{
		my $n = sysread($mine, $buf, 65536, length $buf);
		last if !$n;
	}
	waitpid($pid, 0);
	my $status = $? >> 8;
	my ($len, $type) = unpack('V v', $buf);
	is($type, 3, 'the engine answers FATAL');
	my ($code, $mlen) = unpack('V v', substr($buf, 16, 6));
	my $msg = substr($buf, 22, $mlen);
	like($msg, qr/protocol version mismatch: opus_pg\.so speaks protocol version $other, this opus_engine version $proto\b/,
		'naming both versions') or diag($msg);
	isnt($status, 0, "and exits ($status)");
}

# 2. The supervisor, given a READY of another version.
my $dir = tempdir(CLEANUP => 1);
my $fake = "$dir/fake_engine";
open(my $fh, '>', $fake) or die "$fake: $!";
print $fh <<"PERL";
#!/usr/bin/perl
# a stand-in engine of protocol version $other: reads HELLO, answers READY
use strict;
my \$fd;
for (my \$i = 0; \$i < \@ARGV; \$i++) { \$fd = \$ARGV[\$i + 1] if \$ARGV[\$i] eq '--fd'; }
open(my \$s, '+<&=', \$fd) or die "fd \$fd: \$!";
binmode \$s;
my \$hdr = '';
sysread(\$s, \$hdr, 16 - length \$hdr, length \$hdr) while length \$hdr < 16;
my \$payload = pack('V V', 0x5355504F, $other) . ("\\0" x 64);
syswrite(\$s, pack('V v v Q<', length(\$payload), 2, 0, 0) . \$payload);
sleep 30;
PERL
close $fh;
chmod 0755, $fake;

my $node = opus_node('protocol_version', ready => 0,
	conf => "opus.engine_path = '$fake'\n");
ok(defined poll_until(60, sub {
	slurp_file($node->logfile) =~ /broke the protocol: protocol version mismatch/ }),
	'the supervisor refuses the engine');
like(slurp_file($node->logfile),
	qr/broke the protocol: protocol version mismatch: opus_engine speaks protocol version $other, opus_pg\.so version $proto\b/,
	'the server log names both versions');
like($node->safe_psql('postgres', 'SELECT last_error FROM opus_engine'), qr/exited during start-up/,
	'the engine state says it did not start');
my $q = wait_query(start_query($node, "SELECT opus_generate('x', max_tokens => 1)"), 60);
is($q->{sqlstate}, '58000', 'a generation fails with 58000 instead of hanging') or diag($q->{err});
like($q->{err}, qr/DETAIL:.*opus_engine speaks protocol version $other, opus_pg\.so version $proto\b/,
	'its DETAIL names both versions') or diag($q->{err});
no_server_crash_ok($node);
$node->stop;
done_testing();
