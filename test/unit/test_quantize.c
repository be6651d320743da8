/*
 * test_quantize.c - `opus_engine quantize` (quantize.c) on a small GGUF built
 * with the writer: for every target type, the output reopens, every tensor
 * has the type llama.cpp's rules give it (K-quant fallbacks for rows not a
 * multiple of 256, F16 for rows not a multiple of the block, 1-D -> F32,
 * router and non-weight tensors kept), its data dequantizes close to the
 * input, metadata is copied verbatim with general.file_type set; output is
 * byte-identical across runs and thread counts; bad arguments exit 2 and
 * runtime errors exit 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "format/gguf.h"
#include "quant/qtype.h"
#include "unit.h"

static char dir[64];

static char *
path_in(const char *name)
{
	static char buf[128][128];	/* enough slots for every path this test uses */
	static int	k;

	k = (k + 1) % 128;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
	return buf[k];
}

static int
run_cli(int argc, const char **args)
{
	char	   *argv[8];

	for (int i = 0; i < argc; i++)
		argv[i] = (char *) args[i];
	return opus_cli_quantize(argc, argv);
}

/* ---- the input file ---- */

struct spec
{
	const char *name;
	int			n_dims;
	int64_t		ne[2];
	enum opus_qtype type;
};

static const struct spec specs[] = {
	{"token_embd.weight", 2, {576, 6}, OPUS_TYPE_F32},	/* 576 % 256 != 0 */
	{"blk.0.ffn_down.weight", 2, {512, 3}, OPUS_TYPE_F32},
	{"blk.0.attn_norm.weight", 1, {576, 1}, OPUS_TYPE_F16},
	{"blk.0.odd.weight", 2, {40, 2}, OPUS_TYPE_F32},	/* 40 % 32 != 0 */
	{"blk.0.ffn_gate_inp.weight", 2, {64, 4}, OPUS_TYPE_F32},
	{"pos_table", 2, {64, 2}, OPUS_TYPE_F32},
	{"blk.0.attn_q.weight", 2, {256, 4}, OPUS_TYPE_F16},
	{"position_embd.weight", 2, {64, 8}, OPUS_TYPE_F32},	/* BERT: kept */
	{"token_types.weight", 2, {64, 2}, OPUS_TYPE_F16},
};

#define N_SPECS (sizeof(specs) / sizeof(specs[0]))

static float src_data[N_SPECS][576 * 6];

static uint64_t rng = 12345;

static float
rnd(void)
{
	rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return (float) ((double) (rng >> 11) / 9007199254740992.0 - 0.5);
}

static bool
make_input(const char *path)
{
	struct opus_error err = {0};
	struct opus_gguf_writer *w = opus_gguf_writer_new(32);
	uint8_t		arr[4 + 8 + 12];
	uint32_t	et = OPUS_GGUF_INT32;
	uint64_t	cnt = 3;
	int32_t		vals[3] = {7, -1, 42};
	bool		ok = w != NULL;

	memcpy(arr, &et, 4);
	memcpy(arr + 4, &cnt, 8);
	memcpy(arr + 12, vals, 12);
	ok = ok && opus_gguf_writer_add_str(w, "general.architecture", "llama", &err) == OPUS_OK;
	ok = ok && opus_gguf_writer_add_u32(w, "general.file_type", 0, &err) == OPUS_OK;
	ok = ok && opus_gguf_writer_add_raw(w, "test.array", OPUS_GGUF_ARRAY, arr, sizeof(arr), &err) == OPUS_OK;
	ok = ok && opus_gguf_writer_add_str(w, "test.after", "kept in order", &err) == OPUS_OK;
	for (size_t i = 0; ok && i < N_SPECS; i++)
	{
		int64_t		n = specs[i].ne[0] * specs[i].ne[1];
		uint16_t	h[576 * 6];

		for (int64_t j = 0; j < n; j++)
			src_data[i][j] = rnd();
		if (specs[i].type == OPUS_TYPE_F16)
		{
			for (int64_t j = 0; j < n; j++)
			{
				h[j] = opus_fp32_to_fp16(src_data[i][j]);
				src_data[i][j] = opus_fp16_to_fp32(h[j]);
			}
			ok = opus_gguf_writer_add_tensor(w, specs[i].name, specs[i].n_dims, specs[i].ne,
											 OPUS_TYPE_F16, h, (size_t) n * 2, &err) == OPUS_OK;
		}
		else
			ok = opus_gguf_writer_add_tensor(w, specs[i].name, specs[i].n_dims, specs[i].ne,
											 OPUS_TYPE_F32, src_data[i], (size_t) n * 4,
											 &err) == OPUS_OK;
	}
	ok = ok && opus_gguf_writer_write(w, path, &err) == OPUS_OK;
	if (!ok)
		fprintf(stderr, "make_input: %s\n", err.msg);
	opus_gguf_writer_free(w);
	return ok;
}

/* ---- expectations, restated from llama.cpp's rules ---- */

static enum opus_qtype
expected_type(const struct spec *s, enum opus_qtype target)
{
	enum opus_qtype t = target;

	if (s->n_dims == 1)
		return OPUS_TYPE_F32;
	if (strcmp(s->name, "pos_table") == 0 || strcmp(s->name, "position_embd.weight") == 0 ||
		strcmp(s->name, "token_types.weight") == 0)
		return s->type;
	if (strstr(s->name, "ffn_gate_inp"))
		return OPUS_TYPE_F32;
	if (s->ne[0] % 256 != 0)
	{
		if (t == OPUS_TYPE_Q4_K)
			t = OPUS_TYPE_Q5_0;
		if (t == OPUS_TYPE_Q5_K)
			t = OPUS_TYPE_Q5_1;
		if (t == OPUS_TYPE_Q6_K)
			t = OPUS_TYPE_Q8_0;
	}
	if (s->ne[0] % opus_qtype_info(t)->block_size != 0)
		t = OPUS_TYPE_F16;
	return t;
}

static const struct
{
	const char *name;
	uint32_t	ftype;
	double		bound;			/* rel RMSE of a converted tensor */
}			targets[] = {
	{"F32", 0, 0.0}, {"F16", 1, 1e-3}, {"BF16", 32, 5e-3}, {"Q8_0", 7, 0.01},
	{"Q4_0", 2, 0.13}, {"Q4_1", 3, 0.13}, {"Q5_0", 8, 0.07}, {"Q5_1", 9, 0.07},
	{"Q4_K", 15, 0.13}, {"Q5_K", 17, 0.07}, {"Q6_K", 18, 0.03},
};

static bool
raw_equal(const struct opus_gguf *a, const struct opus_gguf *b, const char *key)
{
	int64_t		ia = opus_gguf_find_key(a, key),
				ib = opus_gguf_find_key(b, key);
	const void *da,
			   *db;
	size_t		sa,
				sb;

	if (ia < 0 || ib < 0 || opus_gguf_kv_type(a, ia) != opus_gguf_kv_type(b, ib))
		return false;
	opus_gguf_kv_raw(a, ia, &da, &sa);
	opus_gguf_kv_raw(b, ib, &db, &sb);
	return sa == sb && memcmp(da, db, sa) == 0;
}

static void
check_output(const char *in, const char *out, int ti)
{
	struct opus_error err = {0};
	struct opus_gguf *a = NULL,
			   *b = NULL;
	enum opus_qtype target = (enum opus_qtype) opus_qtype_from_name(targets[ti].name);
	bool		quantized = target != OPUS_TYPE_F32 && target != OPUS_TYPE_F16 &&
		target != OPUS_TYPE_BF16;
	uint32_t	ft = 99;
	static float y[576 * 6];

	if (opus_gguf_open(in, &a, &err) != OPUS_OK || opus_gguf_open(out, &b, &err) != OPUS_OK)
	{
		CHECK(false, "%s: output reopens: %s", targets[ti].name, err.msg);
		opus_gguf_close(a);
		return;
	}
	CHECK(opus_gguf_get_u32(b, "general.file_type", &ft, &err) == OPUS_OK &&
		  ft == targets[ti].ftype, "%s: general.file_type %u, expected %u",
		  targets[ti].name, ft, targets[ti].ftype);
	CHECK(raw_equal(a, b, "general.architecture") && raw_equal(a, b, "test.array") &&
		  raw_equal(a, b, "test.after"), "%s: metadata copied verbatim", targets[ti].name);
	CHECK(opus_gguf_find_key(b, "test.after") > opus_gguf_find_key(b, "test.array") &&
		  opus_gguf_find_key(b, "general.file_type") == opus_gguf_find_key(a, "general.file_type"),
		  "%s: key order kept", targets[ti].name);
	CHECK(opus_gguf_n_kv(b) == opus_gguf_n_kv(a) + (quantized ? 1 : 0) &&
		  (opus_gguf_find_key(b, "general.quantization_version") >= 0) == quantized,
		  "%s: only general.quantization_version added (quantized targets)", targets[ti].name);
	CHECK(opus_gguf_n_tensors(b) == (int64_t) N_SPECS, "%s: tensor count", targets[ti].name);

	for (size_t i = 0; i < N_SPECS; i++)
	{
		const struct opus_gguf_tensor *t = opus_gguf_find_tensor(b, specs[i].name);
		enum opus_qtype want = expected_type(&specs[i], target);
		int64_t		n = specs[i].ne[0] * specs[i].ne[1];
		double		e = 0.0,
					r = 0.0;

		if (t == NULL)
		{
			CHECK(false, "%s: tensor %s missing", targets[ti].name, specs[i].name);
			continue;
		}
		CHECK(t->type == want && t->n_dims == specs[i].n_dims && t->ne[0] == specs[i].ne[0] &&
			  t->ne[1] == specs[i].ne[1],
			  "%s: %s has type %s, expected %s", targets[ti].name, specs[i].name,
			  opus_qtype_info(t->type)->name, opus_qtype_info(want)->name);
		if (t->type != want)
			continue;
		for (int64_t row = 0; row < specs[i].ne[1]; row++)
		{
			size_t		rs = 0;

			opus_qtype_row_size(t->type, specs[i].ne[0], &rs);
			opus_qtype_info(t->type)->to_float_ref((const uint8_t *) t->data + row * rs,
												   y + row * specs[i].ne[0], specs[i].ne[0]);
		}
		for (int64_t j = 0; j < n; j++)
		{
			e += ((double) y[j] - src_data[i][j]) * ((double) y[j] - src_data[i][j]);
			r += (double) src_data[i][j] * src_data[i][j];
		}
		{
			double		bound = want == target ? targets[ti].bound :
				want == OPUS_TYPE_F16 ? 1e-3 : want == OPUS_TYPE_F32 ? 0.0 : 0.13;

			CHECK(sqrt(e / r) <= bound, "%s: %s rel RMSE %.5f > %.5f", targets[ti].name,
				  specs[i].name, sqrt(e / r), bound);
		}
	}
	opus_gguf_close(a);
	opus_gguf_close(b);
}

static bool
files_equal(const char *p, const char *q)
{
	FILE	   *a = fopen(p, "rb"),
			   *b = fopen(q, "rb");
	bool		same = a && b;
	int			ca,
				cb;

	while (same)
	{
		ca = fgetc(a);
		cb = fgetc(b);
		if (ca != cb)
			same = false;
		if (ca == EOF)
			break;
	}
	if (a)
		fclose(a);
	if (b)
		fclose(b);
	return same;
}

int
main(void)
{
	const char *in;

	snprintf(dir, sizeof(dir), "/tmp/opus_test_quantize.XXXXXX");
	if (mkdtemp(dir) == NULL)
	{
		perror("mkdtemp");
		return 1;
	}
	in = path_in("in.gguf");
	CHECK(make_input(in), "build the input GGUF");
	opus_qtype_init_cpu(false);

	for (size_t ti = 0; ti < sizeof(targets) / sizeof(targets[0]); ti++)
	{
		char		out[128];
		const char *args[] = {"quantize", "--threads", "2", in, out, targets[ti].name};

		snprintf(out, sizeof(out), "%s/out-%s.gguf", dir, targets[ti].name);
		CHECK(run_cli(6, args) == 0, "quantize to %s exits 0", targets[ti].name);
		check_output(in, out, (int) ti);
	}

	/* determinism: another run, other thread counts, lower-case type name */
	{
		const char *a1[] = {"quantize", "-t", "1", in, path_in("k1.gguf"), "q4_k"};
		const char *a3[] = {"quantize", "--threads", "3", in, path_in("k3.gguf"), "Q4_K"};

		CHECK(run_cli(6, a1) == 0 && run_cli(6, a3) == 0, "Q4_K with 1 and 3 threads");
		CHECK(files_equal(path_in("k1.gguf"), path_in("k3.gguf")) &&
			  files_equal(path_in("k1.gguf"), path_in("out-Q4_K.gguf")),
			  "same input gives the same bytes (any thread count)");
	}

	/* re-quantizing a file already in the target type copies its tensors */
	{
		const char *args[] = {"quantize", path_in("out-Q4_1.gguf"), path_in("again.gguf"), "Q4_1"};

		CHECK(run_cli(4, args) == 0 && files_equal(path_in("out-Q4_1.gguf"), path_in("again.gguf")),
			  "Q4_1 -> Q4_1 is byte-identical");
	}

	/* usage errors exit 2, runtime errors exit 1 */
	{
		const char *none[] = {"quantize"};
		const char *two[] = {"quantize", in, path_in("x.gguf")};
		const char *four[] = {"quantize", in, path_in("x.gguf"), "Q4_0", "extra"};
		const char *badtype[] = {"quantize", in, path_in("x.gguf"), "Q2_K"};
		const char *act[] = {"quantize", in, path_in("x.gguf"), "Q8_K"};
		const char *badthr[] = {"quantize", "--threads", "0", in, path_in("x.gguf"), "Q4_0"};
		const char *badopt[] = {"quantize", "--frobnicate", in, path_in("x.gguf"), "Q4_0"};
		const char *missing[] = {"quantize", path_in("nope.gguf"), path_in("x.gguf"), "Q4_0"};
		const char *garbage[] = {"quantize", path_in("garbage.gguf"), path_in("x.gguf"), "Q4_0"};
		const char *unwritable[] = {"quantize", in, "/nonexistent-dir/x.gguf", "Q4_0"};
		FILE	   *f = fopen(path_in("garbage.gguf"), "wb");

		if (f)
		{
			fputs("this is not a gguf file at all, not even close", f);
			fclose(f);
		}
		CHECK(run_cli(1, none) == 2, "no arguments: exit 2");
		CHECK(run_cli(3, two) == 2, "two arguments: exit 2");
		CHECK(run_cli(5, four) == 2, "four arguments: exit 2");
		CHECK(run_cli(4, badtype) == 2, "type without kernels: exit 2");
		CHECK(run_cli(4, act) == 2, "activation-only type: exit 2");
		CHECK(run_cli(6, badthr) == 2, "--threads 0: exit 2");
		CHECK(run_cli(5, badopt) == 2, "unknown option: exit 2");
		CHECK(run_cli(4, missing) == 1, "missing input: exit 1");
		CHECK(run_cli(4, garbage) == 1, "malformed input: exit 1");
		CHECK(run_cli(4, unwritable) == 1, "unwritable output: exit 1");
		CHECK(access(path_in("x.gguf"), F_OK) != 0, "no output left behind by failures");
	}

	/* clean up */
	{
		const char *files[] = {"in.gguf", "k1.gguf", "k3.gguf", "again.gguf", "garbage.gguf", "x.gguf"};

		for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
			unlink(path_in(files[i]));
		for (size_t ti = 0; ti < sizeof(targets) / sizeof(targets[0]); ti++)
		{
			char		out[128];

			snprintf(out, sizeof(out), "%s/out-%s.gguf", dir, targets[ti].name);
			unlink(out);
		}
		rmdir(dir);
	}
	return UNIT_DONE();
}
