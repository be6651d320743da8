/*
 * test_gemma3.c - the gemma3 architecture on the real Gemma 3 270M file
 * against llama.cpp (test/golden/gemma3/gemma3.txt, written by
 * gen_gemma3_golden.py next to it).
 *
 * Skipped (passes) when models/gemma-3-270m-q4_k_m.gguf is absent
 * (`make model-gemma3` fetches it); OPUS_GEMMA3_MODEL names another path,
 * OPUS_GEMMA3_GOLDEN another golden file.
 * For each golden prompt:
 *  - our tokenizer gives llama.cpp's prompt ids (BOS added, special text
 *    parsed for the chat prompts);
 *  - teacher forcing (prompt + llama.cpp's greedy continuation in one
 *    batch): our top-1 equals llama.cpp's at every position where its
 *    top1 - top2 margin is >= 0.5;
 *  - free-running greedy (prompt, then one token per call) is compared
 *    with llama.cpp's and reported; at least 60% of the prompts must match
 *    exactly.
 * The "long" prompts (600-900 tokens, past the model's 512-token sliding
 * window, answers more than 512 tokens back) have no teacher-forcing
 * record: the prompt is prefilled in chunks of max_batch_tokens, then
 * llama.cpp's greedy tokens are fed one by one, and our top-1 after each
 * must equal llama.cpp's next token where its margin is >= 0.5.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "unit.h"

#define GOLDEN "test/golden/gemma3/gemma3.txt"
#define MAX_P 64
#define MAX_SEQ 1024			/* context of the test (long prompts) */
#define CHUNK 128				/* max_batch_tokens */

struct gp
{
	int			special;
	int			is_long;
	char	   *text;
	size_t		text_len;
	int32_t    *prompt,
			   *cont,
			   *tf1;
	float	   *tfm,
			   *cm;
	int			n_prompt,
				n_cont,
				n_tf;
};

static int
parse_ints(const char *s, int32_t **out)
{
	char	   *end;
	long		n = strtol(s, &end, 10);

	*out = calloc(n > 0 ? n : 1, sizeof(int32_t));
	for (long i = 0; i < n; i++)
		(*out)[i] = (int32_t) strtol(end, &end, 10);
	return (int) n;
}

static int
parse_floats(const char *s, float **out)
{
	char	   *end;
	long		n = strtol(s, &end, 10);

	*out = calloc(n > 0 ? n : 1, sizeof(float));
	for (long i = 0; i < n; i++)
		(*out)[i] = strtof(end, &end);
	return (int) n;
}

/* undo the golden's escaping (\\ \n \t \r \xHH) */
static char *
unescape(const char *s, size_t *len)
{
	char	   *o = malloc(strlen(s) + 1);
	size_t		k = 0;

	for (; *s && *s != '\n'; s++)
	{
		if (*s == '\\' && s[1])
		{
			s++;
			if (*s == 'n')
				o[k++] = '\n';
			else if (*s == 't')
				o[k++] = '\t';
			else if (*s == 'r')
				o[k++] = '\r';
			else if (*s == 'x' && s[1] && s[2])
			{
				char		h[3] = {s[1], s[2], 0};

				o[k++] = (char) strtol(h, NULL, 16);
				s += 2;
			}
			else
				o[k++] = *s;
		}
		else
			o[k++] = *s;
	}
	o[k] = '\0';
	*len = k;
	return o;
}

static int32_t
argmax(const float *row, int n)
{
	int32_t		b = 0;

	for (int i = 1; i < n; i++)
		if (row[i] > row[b])
			b = i;
	return b;
}

/*
 * A prompt past the sliding window: prefill in chunks of CHUNK tokens,
 * then feed llama.cpp's greedy tokens one by one; our top-1 before each
 * must be that token where llama.cpp's margin is >= 0.5.  Free-running
 * greedy is compared too (counted in *greedy_equal).
 */
static void
check_long(struct opus_ctx *c, const struct gp *p, int i, int n_vocab,
		   int *checked, int *equal, int *all, int *all_equal, int *greedy_equal)
{
	float	   *lg = malloc(sizeof(float) * (size_t) n_vocab);
	struct opus_error err = {0};
	int32_t		ours[64];
	bool		same = true;

	CHECK(p->n_prompt > 512 && p->n_prompt + p->n_cont <= MAX_SEQ && p->n_cont <= 64 &&
		  p->cm != NULL, "P%d: long golden of %d + %d tokens", i, p->n_prompt, p->n_cont);
	if (!(p->n_prompt > 512 && p->n_prompt + p->n_cont <= MAX_SEQ && p->n_cont <= 64 && p->cm))
	{
		free(lg);
		return;
	}
	for (int pass = 0; pass < 2; pass++)	/* 0: llama.cpp's tokens fed, 1: ours */
	{
		struct opus_seq s;
		struct opus_batch_item it;
		int			k;

		opus_seq_init(&s);
		for (k = 0; k < p->n_prompt; k += CHUNK)
		{
			int			n = p->n_prompt - k < CHUNK ? p->n_prompt - k : CHUNK;

			it = (struct opus_batch_item)
			{
				.seq = &s,.tokens = p->prompt + k,.n_tokens = n,.logits = lg
			};
			if (opus_forward(c, &it, 1, &err) != OPUS_OK)
				break;
		}
		CHECK(k >= p->n_prompt, "P%d prefill: %s", i, err.msg);
		for (k = 0; k < p->n_cont && same; k++)
		{
			int32_t		t1 = argmax(lg, n_vocab);

			if (pass == 0)
			{
				(*all)++;
				*all_equal += t1 == p->cont[k];
				if (p->cm[k] >= 0.5f)
				{
					(*checked)++;
					*equal += t1 == p->cont[k];
					CHECK(t1 == p->cont[k], "P%d (long) step %d: top-1 %d, llama.cpp %d (margin %.3f)",
						  i, k, t1, p->cont[k], p->cm[k]);
				}
			}
			else
			{
				ours[k] = t1;
				same = t1 == p->cont[k];
			}
			it = (struct opus_batch_item)
			{
				.seq = &s,.tokens = pass == 0 ? &p->cont[k] : &ours[k],.n_tokens = 1,.logits = lg
			};
			if (k + 1 < p->n_cont && opus_forward(c, &it, 1, &err) != OPUS_OK)
			{
				CHECK(false, "P%d (long) decode: %s", i, err.msg);
				break;
			}
		}
		opus_seq_release(c, &s);
	}
	*greedy_equal += same;
	printf("P%d (long, %d prompt tokens) greedy %s\n", i, p->n_prompt, same ? "equal" : "differs");
	free(lg);
}

int
main(void)
{
	const char *path = getenv("OPUS_GEMMA3_MODEL");
	const char *golden = GOLDEN;
	struct gp	g[MAX_P];
	int			np = 0;
	char		line[65536];
	FILE	   *f;
	struct opus_model *m = NULL;
	struct opus_ctx *c = NULL;
	struct opus_error err = {0};
	struct opus_ctx_params cp = {0};
	int			n_vocab;
	int			tf_checked = 0,
				tf_equal = 0,
				tf_all = 0,
				tf_all_equal = 0,
				greedy_equal = 0;

	if (!path || !*path)
		path = "models/gemma-3-270m-q4_k_m.gguf";
	f = fopen(path, "rb");
	if (!f)
	{
		printf("test_gemma3: %s absent (make model-gemma3), skipped\n", path);
		CHECK(true, "skip");
		return UNIT_DONE();
	}
	fclose(f);
	if (getenv("OPUS_GEMMA3_GOLDEN") && *getenv("OPUS_GEMMA3_GOLDEN"))
		golden = getenv("OPUS_GEMMA3_GOLDEN");
	f = fopen(golden, "r");
	CHECK(f != NULL, "cannot open %s (run from the repository root)", golden);
	if (!f)
		return UNIT_DONE();
	memset(g, 0, sizeof(g));
	while (fgets(line, sizeof(line), f))
	{
		struct gp  *p = np > 0 ? &g[np - 1] : NULL;

		if (strncmp(line, "P ", 2) == 0 && np < MAX_P)
		{
			p = &g[np++];
			sscanf(line, "P %*d special %d long %d", &p->special, &p->is_long);
		}
		else if (!p)
			continue;
		else if (strncmp(line, "text ", 5) == 0)
			p->text = unescape(line + 5, &p->text_len);
		else if (strncmp(line, "prompt ", 7) == 0)
			p->n_prompt = parse_ints(line + 7, &p->prompt);
		else if (strncmp(line, "cont ", 5) == 0)
			p->n_cont = parse_ints(line + 5, &p->cont);
		else if (strncmp(line, "cont_margin ", 12) == 0)
			CHECK(parse_floats(line + 12, &p->cm) == p->n_cont, "cont_margin length");
		else if (strncmp(line, "tf_top1 ", 8) == 0)
			p->n_tf = parse_ints(line + 8, &p->tf1);
		else if (strncmp(line, "tf_margin ", 10) == 0)
			CHECK(parse_floats(line + 10, &p->tfm) == p->n_tf, "tf_margin length");
	}
	fclose(f);
	CHECK(np >= 32, "only %d golden prompts", np);

	CHECK(opus_model_load(path, NULL, &m, &err) == OPUS_OK, "load: %s", err.msg);
	if (!m)
		return UNIT_DONE();
	CHECK(opus_model_hparams(m)->arch == OPUS_ARCH_GEMMA3, "arch");
	n_vocab = opus_model_hparams(m)->n_vocab;
	cp.n_threads = 2;
	cp.block_size = 16;
	cp.max_batch_tokens = CHUNK;
	cp.n_ctx = MAX_SEQ;
	cp.n_blocks = MAX_SEQ / 16;
	CHECK(opus_ctx_create(m, &cp, &c, &err) == OPUS_OK, "ctx: %s", err.msg);
	if (!c)
	{
		opus_model_free(m);
		return UNIT_DONE();
	}

	for (int i = 0; i < np; i++)
	{
		struct gp  *p = &g[i];
		int32_t		toks[MAX_SEQ];
		int64_t		nt = 0;
		int			n = p->n_prompt + p->n_cont;
		float	   *lg;
		struct opus_seq s;
		struct opus_batch_item it;
		bool		same = true;
		int			ours[64];

		/* tokenization */
		CHECK(opus_tokenizer_encode(opus_model_tokenizer(m), p->text, p->text_len, true,
									p->special != 0, toks, MAX_SEQ, &nt, &err) == OPUS_OK,
			  "P%d encode: %s", i, err.msg);
		CHECK(nt == p->n_prompt &&
			  memcmp(toks, p->prompt, sizeof(int32_t) * (size_t) nt) == 0,
			  "P%d: tokenization differs from llama.cpp's (%lld vs %d tokens)",
			  i, (long long) nt, p->n_prompt);

		if (p->is_long)
		{
			check_long(c, p, i, n_vocab, &tf_checked, &tf_equal, &tf_all, &tf_all_equal,
					   &greedy_equal);
			continue;
		}

		/* teacher forcing, one batch */
		if (n > CHUNK || p->n_tf != n)
		{
			CHECK(false, "P%d: golden sequence of %d tokens (tf %d)", i, n, p->n_tf);
			continue;
		}
		memcpy(toks, p->prompt, sizeof(int32_t) * (size_t) p->n_prompt);
		memcpy(toks + p->n_prompt, p->cont, sizeof(int32_t) * (size_t) p->n_cont);
		lg = malloc(sizeof(float) * (size_t) n * (size_t) n_vocab);
		opus_seq_init(&s);
		it = (struct opus_batch_item)
		{
			.seq = &s,.tokens = toks,.n_tokens = n,.logits = lg,.logits_all = true
		};
		CHECK(opus_forward(c, &it, 1, &err) == OPUS_OK, "P%d forward: %s", i, err.msg);
		for (int q = 0; q < n; q++)
		{
			int32_t		t1 = argmax(lg + (size_t) q * n_vocab, n_vocab);

			tf_all++;
			tf_all_equal += t1 == p->tf1[q];
			if (p->tfm[q] >= 0.5f)
			{
				tf_checked++;
				tf_equal += t1 == p->tf1[q];
				CHECK(t1 == p->tf1[q], "P%d pos %d: top-1 %d, llama.cpp %d (margin %.3f)",
					  i, q, t1, p->tf1[q], p->tfm[q]);
			}
		}
		opus_seq_release(c, &s);

		/* free-running greedy: the prompt, then one token per call */
		opus_seq_init(&s);
		it = (struct opus_batch_item)
		{
			.seq = &s,.tokens = p->prompt,.n_tokens = p->n_prompt,.logits = lg
		};
		for (int k = 0; k < p->n_cont && k < 64; k++)
		{
			if (opus_forward(c, &it, 1, &err) != OPUS_OK)
			{
				CHECK(false, "P%d greedy: %s", i, err.msg);
				break;
			}
			ours[k] = argmax(lg, n_vocab);
			same = same && ours[k] == p->cont[k];
			it.tokens = &ours[k];
			it.n_tokens = 1;
		}
		opus_seq_release(c, &s);
		greedy_equal += same;
		printf("P%d greedy %s\n", i, same ? "equal" : "differs");
		free(lg);
	}
	printf("gemma3: %d prompts; teacher-forced top-1 equal at %d/%d positions with margin >= 0.5, "
		   "%d/%d at all positions; free-running greedy equal for %d/%d prompts\n",
		   np, tf_equal, tf_checked, tf_all_equal, tf_all, greedy_equal, np);
	CHECK(greedy_equal * 10 >= np * 6, "greedy equal for only %d of %d prompts", greedy_equal, np);
	opus_ctx_free(c);
	opus_model_free(m);
	for (int i = 0; i < np; i++)
	{
		free(g[i].text);
		free(g[i].prompt);
		free(g[i].cont);
		free(g[i].tf1);
		free(g[i].tfm);
		free(g[i].cm);
	}
	return UNIT_DONE();
}
