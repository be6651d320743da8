/*
 * genmodel_vocab.c - the vocabulary `opus_engine genmodel` writes: a
 * gpt2-style byte-level BPE of the shape's size, the same for every seed
 * (the shape family's special tokens, the 256 byte tokens, then merged
 * letter tokens with one merge each), and the family's chat template.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/genmodel.h"


static bool
strvec_push(struct strvec *v, char *s)
{
	if (s == NULL)
		return false;
	if (v->n == v->cap)
	{
		size_t		ncap = v->cap ? v->cap * 2 : 1024;
		char	  **p = realloc(v->s, ncap * sizeof(char *));

		if (p == NULL)
		{
			free(s);
			return false;
		}
		v->s = p;
		v->cap = ncap;
	}
	v->s[v->n++] = s;
	return true;
}

static void
strvec_free(struct strvec *v)
{
	for (size_t i = 0; i < v->n; i++)
		free(v->s[i]);
	free(v->s);
	memset(v, 0, sizeof(*v));
}

/* A set of strings (open addressing), to keep the vocabulary unique. */
struct strset
{
	const char **slot;
	size_t		mask;
};

static bool
strset_init(struct strset *h, size_t n)
{
	size_t		cap = 1024;

	while (cap < 2 * n)
		cap *= 2;
	h->slot = calloc(cap, sizeof(char *));
	h->mask = cap - 1;
	return h->slot != NULL;
}

/* Insert s (not copied); false if already present. */
static bool
strset_add(struct strset *h, const char *s)
{
	size_t		i = (size_t) hash_str(s) & h->mask;

	while (h->slot[i] != NULL)
	{
		if (strcmp(h->slot[i], s) == 0)
			return false;
		i = (i + 1) & h->mask;
	}
	h->slot[i] = s;
	return true;
}

static bool
strset_has(const struct strset *h, const char *s)
{
	size_t		i = (size_t) hash_str(s) & h->mask;

	while (h->slot[i] != NULL)
	{
		if (strcmp(h->slot[i], s) == 0)
			return true;
		i = (i + 1) & h->mask;
	}
	return false;
}

static char *
str_cat3(const char *a, const char *b, const char *c)
{
	size_t		la = strlen(a),
				lb = strlen(b),
				lc = strlen(c);
	char	   *s = malloc(la + lb + lc + 1);

	if (s != NULL)
	{
		memcpy(s, a, la);
		memcpy(s + la, b, lb);
		memcpy(s + la + lb, c, lc + 1);
	}
	return s;
}

/* UTF-8 of the GPT-2 byte-level character of byte b; returns its length. */
static int
byte_char(int b, char *out)
{
	unsigned	cp;

	if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
		cp = (unsigned) b;
	else
	{
		int			k = 0;

		/* the non-printable bytes, in order, become U+0100.. */
		for (int x = 0; x < b; x++)
			if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255)))
				k++;
		cp = 256u + (unsigned) k;
	}
	if (cp < 0x80)
	{
		out[0] = (char) cp;
		out[1] = '\0';
		return 1;
	}
	out[0] = (char) (0xC0 | (cp >> 6));
	out[1] = (char) (0x80 | (cp & 0x3F));
	out[2] = '\0';
	return 2;
}

/* The 256 byte tokens in vocabulary order (printable bytes first). */
static int
byte_order(int i)
{
	static int	order[256];
	static bool done;

	if (!done)
	{
		int			k = 0;

		for (int b = 0; b < 256; b++)
			if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
				order[k++] = b;
		for (int b = 0; b < 256; b++)
			if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)))
				order[k++] = b;
		done = true;
	}
	return order[i];
}


void
vocab_free(struct vocab *v)
{
	strvec_free(&v->tokens);
	strvec_free(&v->merges);
	free(v->types);
}

static const char chatml_template[] =
"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
"message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
"{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const char llama3_template[] =
"{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
"'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
"{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
"{% endif %}";

static const char mistral_template[] =
"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
"{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}"
"{{ message['content'] + eos_token }}{% endif %}{% endfor %}";

/*
 * Build the vocabulary: specials, 256 byte tokens, merged letter tokens.
 * Deterministic (its own fixed seed).
 */
enum opus_status
build_vocab(enum tok_flavor flavor, int64_t n_vocab, struct vocab *v,
			struct opus_error *err)
{
	static const char *const chatml_sp[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", NULL};
	static const char *const mistral_sp[] = {"<unk>", "<s>", "</s>", "[INST]", "[/INST]", NULL};
	static const char *const llama3_sp[] = {
		"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
		"<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
		"<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
		"<|eom_id|>", "<|eot_id|>", "<|python_tag|>", NULL
	};
	/* letters by rough English frequency, weighted by repetition */
	static const char letters[] =
		"eeeeeeeeeeeetttttttttaaaaaaaaooooooooiiiiiiinnnnnnnssssssrrrrrrhhhhhhlllldddd"
		"cccuuummmfffppggwwyybbvkxjqz";
	const char *const *sp;
	int64_t		n_sp_named,
				n_special,
				n_regular;
	int64_t		sp_base;		/* id of the first special token */
	struct strset set = {0};
	struct strvec words = {0};	/* letter-only tokens (not owned) */
	struct strvec spaced = {0}; /* " word" tokens (not owned) */
	uint64_t	rng = 0x6F7075735F746F6BULL;
	char		ch[4];
	const char *letter_tok[128] = {NULL};
	enum opus_status st = OPUS_OK;

	memset(v, 0, sizeof(*v));
	sp = flavor == TOK_LLAMA3 ? llama3_sp : flavor == TOK_MISTRAL ? mistral_sp : chatml_sp;
	for (n_sp_named = 0; sp[n_sp_named]; n_sp_named++)
		;
	n_special = n_sp_named;
	if (flavor == TOK_LLAMA3)
		n_special = n_vocab >= 256 + 256 + 256 ? 256 : n_sp_named;
	if (n_vocab < n_special + 256 + 1)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "vocabulary size %lld too small (at least %lld)",
							  (long long) n_vocab, (long long) (n_special + 257));
	n_regular = n_vocab - n_special;
	sp_base = flavor == TOK_LLAMA3 ? n_regular : 0;

	v->types = malloc((size_t) n_vocab * sizeof(int32_t));
	if (v->types == NULL || !strset_init(&set, (size_t) n_vocab))
	{
		st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory building the vocabulary");
		goto done;
	}

#define PUSH_TOKEN(str, type) \
	do { \
		char *s_ = (str); \
		if (!strvec_push(&v->tokens, s_)) \
		{ \
			st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory building the vocabulary"); \
			goto done; \
		} \
		v->types[v->tokens.n - 1] = (type); \
		strset_add(&set, s_); \
	} while (0)

	if (sp_base == 0)
		for (int64_t i = 0; i < n_special; i++)
			PUSH_TOKEN(strdup(sp[i]), 3);
	for (int i = 0; i < 256; i++)
	{
		byte_char(byte_order(i), ch);
		PUSH_TOKEN(strdup(ch), 1);
	}
	/* the letter byte tokens seed the word list, most frequent first */
	for (size_t i = 0; i < v->tokens.n; i++)
	{
		const char *s = v->tokens.s[i];

		if (s[1] == '\0' && ((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
			letter_tok[(int) s[0]] = s;
	}
	for (const char *c = "etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLCUMWFGYPBVKJXQZ"; *c; c++)
		if (!strvec_push(&words, (char *) letter_tok[(int) *c]))
		{
			st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
			goto done;
		}
	/* merged tokens */
	{
		char		space[4];

		byte_char(' ', space);	/* "Ġ" */
		while ((int64_t) v->tokens.n < (sp_base == 0 ? n_vocab : n_regular))
		{
			const char *left = NULL,
					   *right = NULL;
			char	   *tok = NULL;
			bool		spc = false;

			for (int attempt = 0;; attempt++)
			{
				float		u = unif(&rng);
				size_t		nw = words.n,
							ns = spaced.n;
				/* skew towards early (short, "frequent") tokens, less so later */
				float		skew = attempt < 64 ? 3.0f : attempt < 256 ? 1.5f : 1.0f;

				spc = u < 0.45f;
				if (spc)
				{
					size_t		k = (size_t) ((float) (ns + 1) * powf(unif(&rng), skew));

					left = k >= ns ? space : spaced.s[k];
				}
				else
					left = words.s[(size_t) ((float) nw * powf(unif(&rng), skew)) % nw];
				if (unif(&rng) < 0.3f)
					right = letter_tok[(int) letters[(size_t) (unif(&rng) * (float) (sizeof(letters) - 1)) % (sizeof(letters) - 1)]];
				else
					right = words.s[(size_t) ((float) nw * powf(unif(&rng), skew)) % nw];
				if (strlen(left) + strlen(right) > 24)
					continue;
				tok = str_cat3(left, right, "");
				if (tok == NULL)
				{
					st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
					goto done;
				}
				if (!strset_has(&set, tok))
					break;
				free(tok);
				tok = NULL;
				if (attempt > 100000)
				{
					st = opus_error_set(err, OPUS_ERR_INTERNAL,
										"cannot build a vocabulary of %lld tokens",
										(long long) n_vocab);
					goto done;
				}
			}
			if (!strvec_push(&v->merges, str_cat3(left, " ", right)))
			{
				free(tok);
				st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
				goto done;
			}
			PUSH_TOKEN(tok, 1);
			if (!strvec_push(spc ? &spaced : &words, tok))
			{
				st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
				goto done;
			}
		}
	}
	if (sp_base != 0)
		for (int64_t i = 0; i < n_special; i++)
		{
			char		buf[64];

			if (i < n_sp_named)
				snprintf(buf, sizeof(buf), "%s", sp[i]);
			else
				snprintf(buf, sizeof(buf), "<|reserved_special_token_%lld|>",
						 (long long) (i - n_sp_named + 3));
			PUSH_TOKEN(strdup(buf), 3);
		}
#undef PUSH_TOKEN

	switch (flavor)
	{
		case TOK_CHATML:
			v->bos = 1;
			v->eos = 2;
			v->unk = 0;
			v->pad = 2;
			v->pre = "smollm";
			v->chat_template = chatml_template;
			v->add_bos = false;
			break;
		case TOK_LLAMA3:
			v->bos = (int32_t) sp_base;
			v->eos = (int32_t) sp_base + 9;	/* <|eot_id|> */
			v->unk = -1;
			v->pad = -1;
			v->pre = "llama-bpe";
			v->chat_template = llama3_template;
			v->add_bos = true;
			break;
		case TOK_MISTRAL:
			v->bos = 1;
			v->eos = 2;
			v->unk = 0;
			v->pad = -1;
			v->pre = "default";
			v->chat_template = mistral_template;
			v->add_bos = true;
			break;
	}
done:
	free(set.slot);
	free(words.s);
	free(spaced.s);
	if (st != OPUS_OK)
		vocab_free(v);
	return st;
}
