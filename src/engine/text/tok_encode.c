/*
 * tok_encode.c - opus_tokenizer_encode: special-token partitioning, the
 * pre-tokenizers, byte-level BPE and SentencePiece merging.
 *
 * The pre-tokenizers mirror llama.cpp's behaviour, including its hand-written
 * splitters for the GPT-2 and Llama 3 patterns (which differ from a textbook
 * regex engine in small ways, e.g. invalid UTF-8 becomes U+FFFD first).  The
 * Qwen2 pattern is the Llama 3 one with single digits; every code point is
 * matched by one of its alternatives, so the same splitter computes what
 * llama.cpp's std::regex fallback computes for it.  The "default" and
 * "smollm" pre-tokenizers are sequences of simpler patterns, each applied to
 * the pieces the previous one produced.
 *
 * All state lives in a per-call struct enc; the tokenizer is only read.
 */
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_int.h"
#include "text/unicode.h"

/* ------------------------------------------------------- pre-tokenizers */

/*
 * Working state of one encode call.  Code points of the current fragment
 * with their category flags; word boundaries as a list of lengths.
 */
struct enc
{
	const struct opus_tokenizer *t;
	struct opus_vec	out;			/* int32_t token ids */
	struct opus_vec	cpt;			/* uint32_t */
	struct opus_vec	flg;			/* uint8_t */
	struct opus_vec	seg_a;			/* size_t segment lengths */
	struct opus_vec	seg_b;
	struct opus_buf	word;			/* byte-encoded word / SPM text */
	struct opus_vec	sym;			/* struct sym */
	struct opus_vec	heap;			/* struct bigram */
	bool		failed;			/* out of memory */
	enum opus_status status;	/* first error */
	char		msg[96];
};

static inline void
seg_add(struct enc *e, struct opus_vec *segs, size_t len)
{
	size_t	   *p;

	if (len == 0)
		return;
	p = opus_vec_push(segs);
	if (!p)
	{
		e->failed = true;
		return;
	}
	*p = len;
}

/* flags of the code point at pos, or 0 outside [ini, end) */
#define FL(pos) ((pos) >= ini && (pos) < end ? fl[pos] : 0)
#define CP(pos) ((pos) >= ini && (pos) < end ? cp[pos] : 0xffffffffu)
#define IS_L(f) (((f) & OPUS_UC_LETTER) != 0)
#define IS_N(f) (((f) & OPUS_UC_NUMBER) != 0)
#define IS_WS(f) (((f) & OPUS_UC_WHITESPACE) != 0)

/* \p{N} (each digit alone) or \p{N}+ (runs), as a regex split: gaps kept. */
static void
split_numbers(struct enc *e, size_t ini, size_t end, bool runs, struct opus_vec *o)
{
	const uint8_t *fl = e->flg.p;
	size_t		gap = ini;

	for (size_t p = ini; p < end;)
	{
		if (IS_N(fl[p]))
		{
			size_t		q = p + 1;

			if (runs)
				while (q < end && IS_N(fl[q]))
					q++;
			seg_add(e, o, p - gap);
			seg_add(e, o, q - p);
			p = gap = q;
		}
		else
			p++;
	}
	seg_add(e, o, end - gap);
}

/* [0-9][0-9][0-9], leftmost non-overlapping matches, gaps kept. */
static void
split_digits3(struct enc *e, size_t ini, size_t end, struct opus_vec *o)
{
	const uint32_t *cp = e->cpt.p;
	size_t		gap = ini;

#define ISD(c) ((c) >= '0' && (c) <= '9')
	for (size_t p = ini; p + 3 <= end;)
	{
		if (ISD(cp[p]) && ISD(cp[p + 1]) && ISD(cp[p + 2]))
		{
			seg_add(e, o, p - gap);
			seg_add(e, o, 3);
			p = gap = p + 3;
		}
		else
			p++;
	}
#undef ISD
	seg_add(e, o, end - gap);
}

/* [\p{P}\$\+<=>\^~\|]+ (the "default" pre-tokenizer's first pattern). */
static void
split_punct(struct enc *e, size_t ini, size_t end, struct opus_vec *o)
{
	const uint32_t *cp = e->cpt.p;
	const uint8_t *fl = e->flg.p;
	size_t		gap = ini;

#define ISP(i) ((fl[i] & OPUS_UC_PUNCT) || (cp[i] < 128 && strchr("$+<=>^~|", (int) cp[i]) && cp[i]))
	for (size_t p = ini; p < end;)
	{
		if (ISP(p))
		{
			size_t		q = p + 1;

			while (q < end && ISP(q))
				q++;
			seg_add(e, o, p - gap);
			seg_add(e, o, q - p);
			p = gap = q;
		}
		else
			p++;
	}
#undef ISP
	seg_add(e, o, end - gap);
}

/*
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
 * the way llama.cpp's hand-written splitter evaluates it.
 */
static void
split_gpt2(struct enc *e, size_t ini, size_t end, struct opus_vec *o)
{
	const uint32_t *cp = e->cpt.p;
	const uint8_t *fl = e->flg.p;
	size_t		prev = ini;

	for (size_t pos = ini; pos < end;)
	{
		uint32_t	c = cp[pos];
		uint8_t		f2;
		size_t		nws;

		if (c == '\'' && pos + 1 < end)
		{
			uint32_t	c1 = cp[pos + 1];

			if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
			{
				pos += 2;
				seg_add(e, o, pos - prev);
				prev = pos;
				continue;
			}
			if (pos + 2 < end)
			{
				uint32_t	c2 = cp[pos + 2];

				if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') ||
					(c1 == 'l' && c2 == 'l'))
				{
					pos += 3;
					seg_add(e, o, pos - prev);
					prev = pos;
					continue;
				}
			}
		}
		f2 = c == ' ' ? FL(pos + 1) : fl[pos];
		if (IS_L(f2) || IS_N(f2) || (!(IS_WS(f2) || IS_L(f2) || IS_N(f2)) && f2))
		{
			int			kind = IS_L(f2) ? 0 : IS_N(f2) ? 1 : 2;

			pos += (c == ' ');
			for (;;)
			{
				uint8_t		f = FL(pos);
				bool		ok = kind == 0 ? IS_L(f) : kind == 1 ? IS_N(f) :
					(!(IS_WS(f) || IS_L(f) || IS_N(f)) && f);

				if (!ok)
					break;
				pos++;
			}
			seg_add(e, o, pos - prev);
			prev = pos;
			continue;
		}
		nws = 0;
		while (IS_WS(FL(pos + nws)))
			nws++;
		if (nws > 1 && pos + nws < end)
		{
			pos += nws - 1;		/* \s+(?!\S): leave one for the next word */
			seg_add(e, o, pos - prev);
			prev = pos;
			continue;
		}
		if (nws > 0)
		{
			pos += nws;
			seg_add(e, o, pos - prev);
			prev = pos;
			continue;
		}
		pos++;					/* no match: a word of its own */
		seg_add(e, o, pos - prev);
		prev = pos;
	}
}

/*
 * (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
 * |[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,K}| ?[^\s\p{L}\p{N}]+[\r\n]*
 * |\s*[\r\n]+|\s+(?!\S)|\s+
 * with K = 3 (Llama 3) or K = 1 (Qwen2).  Every code point is matched by
 * some alternative, so the regex and llama.cpp's splitter agree.
 */
static void
split_llama3(struct enc *e, size_t ini, size_t end, size_t max_digits,
			 struct opus_vec *o)
{
	const uint32_t *cp = e->cpt.p;
	const uint8_t *fl = e->flg.p;
	size_t		prev = ini;

#define LOW(c) ((c) >= 'A' && (c) <= 'Z' ? (c) + 32 : (c))
#define EMIT() do { seg_add(e, o, pos - prev); prev = pos; } while (0)
	for (size_t pos = ini; pos < end;)
	{
		uint32_t	c = cp[pos];
		uint8_t		f = fl[pos];
		uint8_t		f2;
		size_t		nws,
					last_nl;

		if (c == '\'' && pos + 1 < end)
		{
			uint32_t	c1 = LOW(cp[pos + 1]);

			if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
			{
				pos += 2;
				EMIT();
				continue;
			}
			if (pos + 2 < end)
			{
				uint32_t	c2 = LOW(cp[pos + 2]);

				if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') ||
					(c1 == 'l' && c2 == 'l'))
				{
					pos += 3;
					EMIT();
					continue;
				}
			}
		}
		/* [^\r\n\p{L}\p{N}]?\p{L}+ */
		if (!(c == '\r' || c == '\n' || IS_N(f)) && (IS_L(f) || IS_L(FL(pos + 1))))
		{
			pos++;
			while (IS_L(FL(pos)))
				pos++;
			EMIT();
			continue;
		}
		/* \p{N}{1,K} */
		if (IS_N(f))
		{
			size_t		n = 0;

			while (n < max_digits && IS_N(FL(pos)))
			{
				pos++;
				n++;
			}
			EMIT();
			continue;
		}
		/* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
		f2 = c == ' ' ? FL(pos + 1) : f;
		if (!(IS_WS(f2) || IS_L(f2) || IS_N(f2)) && f)
		{
			pos += (c == ' ');
			while (!(IS_WS(f2) || IS_L(f2) || IS_N(f2)) && f2)
			{
				pos++;
				f2 = FL(pos);
			}
			while (CP(pos) == '\r' || CP(pos) == '\n')
				pos++;
			EMIT();
			continue;
		}
		nws = 0;
		last_nl = 0;
		while (IS_WS(FL(pos + nws)))
		{
			uint32_t	c2 = cp[pos + nws];

			if (c2 == '\r' || c2 == '\n')
				last_nl = pos + nws + 1;
			nws++;
		}
		if (last_nl > 0)		/* \s*[\r\n]+ */
		{
			pos = last_nl;
			EMIT();
			continue;
		}
		if (nws > 1 && pos + nws < end) /* \s+(?!\S) */
		{
			pos += nws - 1;
			EMIT();
			continue;
		}
		if (nws > 0)			/* \s+ */
		{
			pos += nws;
			EMIT();
			continue;
		}
		pos++;
		EMIT();
	}
#undef LOW
#undef EMIT
}

#undef FL
#undef CP

enum splitter
{
	SPLIT_DIGIT,
	SPLIT_DIGITS,
	SPLIT_DIGIT3,
	SPLIT_PUNCT,
	SPLIT_GPT2,
	SPLIT_LLAMA3,
	SPLIT_QWEN2
};

/* Apply one splitter to every current segment (e->seg_a -> e->seg_b, swapped). */
static void
apply_split(struct enc *e, enum splitter s)
{
	size_t		start = 0;
	const size_t *segs = e->seg_a.p;
	struct opus_vec	tmp;

	e->seg_b.n = 0;
	for (size_t i = 0; i < e->seg_a.n; i++)
	{
		size_t		ini = start,
					end = start + segs[i];

		switch (s)
		{
			case SPLIT_DIGIT:
				split_numbers(e, ini, end, false, &e->seg_b);
				break;
			case SPLIT_DIGITS:
				split_numbers(e, ini, end, true, &e->seg_b);
				break;
			case SPLIT_DIGIT3:
				split_digits3(e, ini, end, &e->seg_b);
				break;
			case SPLIT_PUNCT:
				split_punct(e, ini, end, &e->seg_b);
				break;
			case SPLIT_GPT2:
				split_gpt2(e, ini, end, &e->seg_b);
				break;
			case SPLIT_LLAMA3:
				split_llama3(e, ini, end, 3, &e->seg_b);
				break;
			case SPLIT_QWEN2:
				split_llama3(e, ini, end, 1, &e->seg_b);
				break;
		}
		start = end;
	}
	tmp = e->seg_a;
	e->seg_a = e->seg_b;
	e->seg_b = tmp;
}

/* ------------------------------------------------------------ BPE merge */

struct sym
{
	int32_t		prev,
				next;
	uint32_t	off;			/* into e->word */
	uint32_t	n;
};

struct bigram
{
	int32_t		left,
				right;
	float		score;			/* SPM */
	int32_t		rank;			/* BPE */
	uint32_t	size;
	uint32_t	ln,
				rn;				/* BPE: part lengths when queued */
};

/* heap order: BPE lowest rank first, SPM highest score first; then leftmost */
static inline bool
bigram_before(const struct bigram *a, const struct bigram *b, bool spm)
{
	if (spm)
	{
		if (a->score != b->score)
			return a->score > b->score;
	}
	else if (a->rank != b->rank)
		return a->rank < b->rank;
	return a->left < b->left;
}

static bool
heap_push(struct opus_vec *h, const struct bigram *b, bool spm)
{
	struct bigram *a;
	size_t		i;

	if (!opus_vec_push(h))
		return false;
	a = h->p;
	i = h->n - 1;
	while (i > 0)
	{
		size_t		parent = (i - 1) / 2;

		if (!bigram_before(b, &a[parent], spm))
			break;
		a[i] = a[parent];
		i = parent;
	}
	a[i] = *b;
	return true;
}

static struct bigram
heap_pop(struct opus_vec *h, bool spm)
{
	struct bigram *a = h->p;
	struct bigram top = a[0];
	struct bigram last = a[--h->n];
	size_t		i = 0;

	for (;;)
	{
		size_t		c = 2 * i + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && bigram_before(&a[c + 1], &a[c], spm))
			c++;
		if (!bigram_before(&a[c], &last, spm))
			break;
		a[i] = a[c];
		i = c;
	}
	if (h->n > 0)
		a[i] = last;
	return top;
}

static void
push_token(struct enc *e, int32_t id)
{
	int32_t    *p = opus_vec_push(&e->out);

	if (!p)
		e->failed = true;
	else
		*p = id;
}

/* Split e->word into one symbol per UTF-8 character. */
static bool
make_symbols(struct enc *e)
{
	const uint8_t *w = (const uint8_t *) e->word.p;
	size_t		n = e->word.n;
	struct sym *s;
	size_t		k = 0;

	if (!opus_vec_reserve(&e->sym, n))
		return false;
	s = e->sym.p;
	for (size_t off = 0; off < n;)
	{
		size_t		len = (size_t) opus_utf8_seq_len(w[off]);

		if (len > n - off)
			len = n - off;
		s[k].off = (uint32_t) off;
		s[k].n = (uint32_t) len;
		s[k].prev = (int32_t) k - 1;
		off += len;
		s[k].next = off == n ? -1 : (int32_t) k + 1;
		k++;
	}
	e->sym.n = k;
	return true;
}

static void
bpe_add_bigram(struct enc *e, int32_t left, int32_t right)
{
	struct sym *s = e->sym.p;
	struct bigram b;
	int32_t		rank;

	if (left < 0 || right < 0)
		return;
	rank = merge_find(e->t, e->word.p + s[left].off, s[left].n,
					  e->word.p + s[right].off, s[right].n);
	if (rank < 0)
		return;
	b.left = left;
	b.right = right;
	b.rank = rank;
	b.score = 0;
	b.ln = s[left].n;
	b.rn = s[right].n;
	b.size = b.ln + b.rn;
	if (!heap_push(&e->heap, &b, false))
		e->failed = true;
}

/* BPE-encode the byte-encoded word in e->word and append its tokens. */
static void
bpe_word(struct enc *e)
{
	const struct opus_tokenizer *t = e->t;
	struct sym *s;

	if (e->word.n == 0)
		return;
	if (t->ignore_merges)
	{
		int32_t		id = vocab_find(t, e->word.p, e->word.n);

		if (id >= 0)
		{
			push_token(e, id);
			return;
		}
	}
	if (e->word.n > UINT32_MAX / 2 || !make_symbols(e))
	{
		e->failed = true;
		return;
	}
	e->heap.n = 0;
	for (size_t i = 1; i < e->sym.n; i++)
		bpe_add_bigram(e, (int32_t) i - 1, (int32_t) i);
	s = e->sym.p;
	while (e->heap.n > 0)
	{
		struct bigram b = heap_pop(&e->heap, false);
		struct sym *l = &s[b.left];
		struct sym *r = &s[b.right];

		/* stale: one side was merged into something else since queuing */
		if (l->n == 0 || r->n == 0 || l->n != b.ln || r->n != b.rn)
			continue;
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0)
			s[r->next].prev = b.left;
		bpe_add_bigram(e, l->prev, b.left);
		bpe_add_bigram(e, b.left, l->next);
		s = e->sym.p;
	}
	for (int32_t i = 0; i != -1; i = s[i].next)
	{
		const char *txt = e->word.p + s[i].off;
		int32_t		id;

		if (s[i].n == 0)
			continue;
		id = vocab_find(t, txt, s[i].n);
		if (id >= 0)
			push_token(e, id);
		else
		{
			/* llama.cpp looks each byte up as a one-byte token */
			for (uint32_t k = 0; k < s[i].n; k++)
			{
				int32_t		bid = vocab_find(t, txt + k, 1);

				if (bid >= 0)
					push_token(e, bid);
			}
		}
	}
}

static const enum splitter pre_default[] = {SPLIT_PUNCT, SPLIT_GPT2, SPLIT_DIGITS, SPLIT_DIGIT3};
static const enum splitter pre_gpt2[] = {SPLIT_GPT2};
static const enum splitter pre_smollm[] = {SPLIT_DIGIT, SPLIT_GPT2};
static const enum splitter pre_llama3[] = {SPLIT_LLAMA3};
static const enum splitter pre_qwen2[] = {SPLIT_QWEN2};

/* Tokenize one raw-text fragment with byte-level BPE. */
static void
bpe_fragment(struct enc *e, const char *text, size_t len)
{
	const struct opus_tokenizer *t = e->t;
	const enum splitter *steps;
	size_t		n_steps;
	size_t		m = 0;
	size_t		start = 0;
	const uint32_t *cp;

	switch (t->pre)
	{
		case PRE_GPT2:
			steps = pre_gpt2;
			n_steps = 1;
			break;
		case PRE_SMOLLM:
			steps = pre_smollm;
			n_steps = 2;
			break;
		case PRE_LLAMA3:
			steps = pre_llama3;
			n_steps = 1;
			break;
		case PRE_QWEN2:
			steps = pre_qwen2;
			n_steps = 1;
			break;
		default:
			steps = pre_default;
			n_steps = 4;
			break;
	}

	/* decode to code points (invalid bytes become U+FFFD) */
	if (!opus_vec_reserve(&e->cpt, len) || !opus_vec_reserve(&e->flg, len))
	{
		e->failed = true;
		return;
	}
	for (size_t off = 0; off < len;)
	{
		uint32_t	c = opus_utf8_decode((const uint8_t *) text, len, &off);

		((uint32_t *) e->cpt.p)[m] = c;
		((uint8_t *) e->flg.p)[m] = opus_unicode_flags(c);
		m++;
	}
	e->cpt.n = e->flg.n = m;

	e->seg_a.n = 0;
	seg_add(e, &e->seg_a, m);
	for (size_t i = 0; i < n_steps && !e->failed; i++)
		apply_split(e, steps[i]);
	if (e->failed)
		return;

	cp = e->cpt.p;
	for (size_t w = 0; w < e->seg_a.n && !e->failed; w++)
	{
		size_t		wl = ((size_t *) e->seg_a.p)[w];

		e->word.n = 0;
		for (size_t i = start; i < start + wl; i++)
		{
			char		u[4];
			int			ul = opus_utf8_encode(cp[i], u);

			for (int k = 0; k < ul; k++)
			{
				uint8_t		b = (uint8_t) u[k];

				if (!opus_buf_put(&e->word, t->byte_utf8[b], t->byte_utf8_len[b]))
				{
					e->failed = true;
					return;
				}
			}
		}
		start += wl;
		bpe_word(e);
	}
}

/* ------------------------------------------------------------------ SPM */

static void
spm_add_bigram(struct enc *e, int32_t left, int32_t right)
{
	struct sym *s = e->sym.p;
	struct bigram b;
	int32_t		id;

	if (left < 0 || right < 0)
		return;
	id = vocab_find(e->t, e->word.p + s[left].off, s[left].n + s[right].n);
	if (id < 0)
		return;
	b.left = left;
	b.right = right;
	b.score = e->t->score[id];
	b.rank = 0;
	b.size = s[left].n + s[right].n;
	b.ln = b.rn = 0;
	if (!heap_push(&e->heap, &b, true))
		e->failed = true;
}

static void
spm_byte(struct enc *e, uint8_t ch)
{
	static const char hex[] = "0123456789ABCDEF";
	char		name[6] = {'<', '0', 'x', hex[ch >> 4], hex[ch & 15], '>'};
	int32_t		id = vocab_find(e->t, name, 6);

	if (id < 0)
		id = vocab_find(e->t, (const char *) &ch, 1);
	if (id < 0)
	{
		if (e->status == OPUS_OK)
		{
			e->status = OPUS_ERR_TOKENIZE;
			snprintf(e->msg, sizeof(e->msg), "byte 0x%02x has no token in the vocabulary", ch);
		}
		return;
	}
	push_token(e, id);
}

/* Tokenize one raw-text fragment with SentencePiece. */
static void
spm_fragment(struct enc *e, const char *text, size_t len, bool prefix_space)
{
	struct sym *s;

	e->word.n = 0;
	if (prefix_space && !opus_buf_put(&e->word, "\xe2\x96\x81", 3))
		goto oom;
	for (size_t i = 0; i < len; i++)
	{
		bool		ok = text[i] == ' ' ? opus_buf_put(&e->word, "\xe2\x96\x81", 3) :
			opus_buf_put(&e->word, text + i, 1);

		if (!ok)
			goto oom;
	}
	if (e->word.n == 0)
		return;
	if (e->word.n > UINT32_MAX / 2 || !make_symbols(e))
		goto oom;
	e->heap.n = 0;
	for (size_t i = 1; i < e->sym.n; i++)
		spm_add_bigram(e, (int32_t) i - 1, (int32_t) i);
	s = e->sym.p;
	while (e->heap.n > 0)
	{
		struct bigram b = heap_pop(&e->heap, true);
		struct sym *l = &s[b.left];
		struct sym *r = &s[b.right];

		if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
			continue;
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0)
			s[r->next].prev = b.left;
		spm_add_bigram(e, l->prev, b.left);
		spm_add_bigram(e, b.left, l->next);
		s = e->sym.p;
	}

	/*
	 * Every merged symbol is a vocabulary entry by construction, so only
	 * single characters can miss; llama.cpp's reverse-merge lookup never
	 * applies to them (its keys are all vocabulary entries) and they fall
	 * back to byte tokens.
	 */
	for (int32_t i = 0; i != -1; i = s[i].next)
	{
		const char *txt = e->word.p + s[i].off;
		int32_t		id;

		if (s[i].n == 0)
			continue;
		id = vocab_find(e->t, txt, s[i].n);
		if (id >= 0)
			push_token(e, id);
		else
			for (uint32_t k = 0; k < s[i].n; k++)
				spm_byte(e, (uint8_t) txt[k]);
	}
	return;
oom:
	e->failed = true;
}

/* ------------------------------------------------- special token split */

struct frag
{
	int32_t		tok;			/* >= 0: a special token; -1: raw text */
	size_t		off,
				len;
};

/* Whether [off, off + n) overlaps one of the literal spans. */
static bool
in_literal(const struct opus_text_span *lit, int n_lit, size_t off, size_t n)
{
	for (int i = 0; i < n_lit; i++)
	{
		if (off < lit[i].off + lit[i].len && off + n > lit[i].off)
			return true;
	}
	return false;
}

/*
 * Split text at special-token texts.  Control (and unknown) tokens are
 * recognised only with parse_special, and then not where they overlap a
 * literal span (chat message contents: there they stay plain text).
 */
static bool
partition_special(const struct opus_tokenizer *t, const char *text, size_t len,
				  bool parse_special, const struct opus_text_span *lit,
				  int n_lit, struct opus_vec *frags)
{
	struct opus_vec	next = {.elem = sizeof(struct frag)};
	struct frag *f;
	uint8_t    *pairs;			/* which byte pairs occur in the text */

	frags->n = 0;
	if (len == 0)
		return true;
	f = opus_vec_push(frags);
	if (!f)
		return false;
	f->tok = -1;
	f->off = 0;
	f->len = len;

	pairs = calloc(65536 / 8, 1);
	if (!pairs)
		return false;
	for (size_t i = 0; i + 1 < len; i++)
	{
		unsigned	k = ((unsigned) (uint8_t) text[i] << 8) | (uint8_t) text[i + 1];

		pairs[k >> 3] |= (uint8_t) (1u << (k & 7));
	}

	for (int32_t si = 0; si < t->n_special; si++)
	{
		int32_t		id = t->special[si];
		size_t		tl;
		const char *tt = tok_text(t, id, &tl);
		bool		found = false;
		bool		control = (t->attr[id] & (ATTR_CONTROL | ATTR_UNKNOWN)) != 0;

		if (!parse_special && control)
			continue;
		if (tl == 0 || tl > len)
			continue;
		if (tl >= 2)
		{
			unsigned	k = ((unsigned) (uint8_t) tt[0] << 8) | (uint8_t) tt[1];

			if (!(pairs[k >> 3] & (1u << (k & 7))))
				continue;
		}

		next.n = 0;
		for (size_t fi = 0; fi < frags->n; fi++)
		{
			struct frag cur = ((struct frag *) frags->p)[fi];
			struct frag *nf;

			if (cur.tok >= 0)
			{
				if (!(nf = opus_vec_push(&next)))
					goto oom;
				*nf = cur;
				continue;
			}
			for (size_t from = cur.off; from < cur.off + cur.len;)
			{
				const char *m = memmem(text + from, cur.off + cur.len - from, tt, tl);
				size_t		mo;

				if (!m)
					break;
				mo = (size_t) (m - text);
				if (control && n_lit > 0 && in_literal(lit, n_lit, mo, tl))
				{
					from = mo + 1;
					continue;
				}
				found = true;
				if (mo > cur.off)
				{
					if (!(nf = opus_vec_push(&next)))
						goto oom;
					nf->tok = -1;
					nf->off = cur.off;
					nf->len = mo - cur.off;
				}
				if (!(nf = opus_vec_push(&next)))
					goto oom;
				nf->tok = id;
				nf->off = mo;
				nf->len = tl;
				cur.len -= mo + tl - cur.off;
				cur.off = mo + tl;
				from = cur.off;
			}
			if (cur.len > 0)
			{
				if (!(nf = opus_vec_push(&next)))
					goto oom;
				*nf = cur;
			}
		}
		if (found)
		{
			struct opus_vec	tmp = *frags;

			*frags = next;
			next = tmp;
		}
	}
	free(next.p);
	free(pairs);
	return true;
oom:
	free(next.p);
	free(pairs);
	return false;
}

/* ---------------------------------------------------------------- encode */

int32_t
opus_tokenizer_n_special(const struct opus_tokenizer *t)
{
	return t->n_special;
}

const char *
opus_tokenizer_control_text(const struct opus_tokenizer *t, int32_t i, size_t *len)
{
	int32_t		id;
	const char *tt;

	*len = 0;
	if (i < 0 || i >= t->n_special)
		return NULL;
	id = t->special[i];
	tt = tok_text(t, id, len);
	if (!(t->attr[id] & (ATTR_CONTROL | ATTR_UNKNOWN)) || *len == 0)
	{
		*len = 0;
		return NULL;
	}
	return tt;
}

int32_t
opus_tokenizer_find_control(const struct opus_tokenizer *t, const char *text,
							size_t len)
{
	for (int32_t si = 0; si < t->n_special; si++)
	{
		int32_t		id = t->special[si];
		size_t		tl;
		const char *tt = tok_text(t, id, &tl);

		if (!(t->attr[id] & (ATTR_CONTROL | ATTR_UNKNOWN)) || tl == 0 || tl > len)
			continue;
		if (memmem(text, len, tt, tl))
			return id;
	}
	return -1;
}

enum opus_status
opus_tokenizer_encode(const struct opus_tokenizer *t, const char *text,
					  size_t len, bool add_special, bool parse_special,
					  int32_t *out, int64_t max_out, int64_t *n_out,
					  struct opus_error *err)
{
	return opus_tokenizer_encode_spans(t, text, len, add_special, parse_special,
									   NULL, 0, out, max_out, n_out, err);
}

enum opus_status
opus_tokenizer_encode_spans(const struct opus_tokenizer *t, const char *text,
							size_t len, bool add_special, bool parse_special,
							const struct opus_text_span *literal, int n_literal,
							int32_t *out, int64_t max_out, int64_t *n_out,
							struct opus_error *err)
{
	struct enc	e = {
		.t = t,
		.out = {.elem = sizeof(int32_t)},
		.cpt = {.elem = sizeof(uint32_t)},
		.flg = {.elem = 1},
		.seg_a = {.elem = sizeof(size_t)},
		.seg_b = {.elem = sizeof(size_t)},
		.sym = {.elem = sizeof(struct sym)},
		.heap = {.elem = sizeof(struct bigram)},
		.status = OPUS_OK,
	};
	struct opus_vec	frags = {.elem = sizeof(struct frag)};
	enum opus_status st = OPUS_OK;

	*n_out = 0;
	if (text == NULL && len > 0)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "text is NULL");
	if (max_out < 0 || (max_out > 0 && out == NULL))
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "bad output buffer");

	if (!partition_special(t, text, len, parse_special, literal, n_literal, &frags))
		e.failed = true;

	if (t->kind == KIND_WPM)
	{
		/* llama.cpp: add_special means [CLS] text [SEP], whatever add_bos says */
		if (add_special && t->bos >= 0)
			push_token(&e, t->bos);
		for (size_t i = 0; i < frags.n && !e.failed; i++)
		{
			struct frag *f = &((struct frag *) frags.p)[i];

			if (f->tok >= 0)
				push_token(&e, f->tok);
			else if (!opus_wpm_tokenize(t, text + f->off, f->len, &e.out))
				e.failed = true;
		}
		if (add_special && t->sep >= 0)
			push_token(&e, t->sep);
		goto done;
	}
	if (add_special && t->add_bos)
		push_token(&e, t->bos);
	if (t->kind == KIND_BPE)
	{
		for (size_t i = 0; i < frags.n && !e.failed; i++)
		{
			struct frag *f = &((struct frag *) frags.p)[i];

			if (f->tok >= 0)
				push_token(&e, f->tok);
			else
				bpe_fragment(&e, text + f->off, f->len);
		}
	}
	else
	{
		bool		prev_special = true;	/* prefix a space at the start */

		for (size_t i = 0; i < frags.n && !e.failed; i++)
		{
			struct frag *f = &((struct frag *) frags.p)[i];

			if (f->tok >= 0)
			{
				push_token(&e, f->tok);
				prev_special = true;
			}
			else
			{
				spm_fragment(&e, text + f->off, f->len,
							 t->add_space_prefix && prev_special);
				prev_special = false;
			}
		}
	}
	if (add_special && t->add_eos)
		push_token(&e, t->eos);

done:
	if (e.failed)
		st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory while tokenizing");
	else if (e.status != OPUS_OK)
		st = opus_error_set(err, e.status, "%s", e.msg);
	else
	{
		*n_out = (int64_t) e.out.n;
		if ((int64_t) e.out.n > max_out)
			st = opus_error_set(err, OPUS_ERR_CAPACITY,
								"text needs %zu tokens, buffer holds %lld",
								e.out.n, (long long) max_out);
		else if (e.out.n > 0)
			memcpy(out, e.out.p, e.out.n * sizeof(int32_t));
	}
	free(frags.p);
	free(e.out.p);
	free(e.cpt.p);
	free(e.flg.p);
	free(e.seg_a.p);
	free(e.seg_b.p);
	free(e.word.p);
	free(e.sym.p);
	free(e.heap.p);
	return st;
}
