/*
 * sampler.c - turning a row of logits into the next token.
 *
 * The chain (see sampler.h): penalties -> greedy if temperature == 0 ->
 * top_k -> top_p -> min_p -> temperature -> softmax -> one draw from the
 * request's own xoshiro256** generator (seeded through splitmix64).
 *
 * Non-finite logits: NaN is treated as -inf; if some logits are +inf, only
 * those tokens remain, with equal weight.  If no token has a logit above
 * -inf, the result is token 0 (the argmax with ties going to the lowest id).
 *
 * Cost: the logits row is 49k-152k floats, so nothing sorts it whole unless
 * it must.  top_k picks its candidates with a bounded min-heap (O(V log k));
 * top_p without top_k first tries the best 64 (a heap again), which is
 * enough for a peaked distribution, and otherwise finds the nucleus with a
 * quickselect on probability mass (expected O(V), nothing sorted); pure temperature / min_p sampling works in place on the logits row (which
 * the API allows us to overwrite).  Exactly one random number is drawn per
 * non-greedy sample and none for greedy, so a request's RNG stream depends
 * only on its own samples.
 *
 * A sampler belongs to one request and is used by one thread at a time.
 */
#include "runtime/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct opus_cand
{
	int32_t		id;
	float		logit;
};

struct opus_sampler
{
	struct opus_sampling_params p;
	int32_t		n_vocab;
	uint64_t	rng[4];			/* xoshiro256** state */
	struct opus_cand *cand;		/* candidates (cand_cap allocated) */
	int64_t		cand_cap;
	int32_t    *win;			/* penalty window scratch (win_cap) */
	int64_t		win_cap;
};

void
opus_sampling_defaults(struct opus_sampling_params *p)
{
	memset(p, 0, sizeof(*p));
#define DEFAULT_FIELD(name, ...) p->name = OPUS_PARAM_DEFAULT(name);
	OPUS_PARAMS_SAMPLING(DEFAULT_FIELD)
#undef DEFAULT_FIELD
	p->repeat_last_n = 64;
}

enum opus_status
opus_param_error(struct opus_error *err, enum opus_param_id id, double v)
{
	char		range[OPUS_PARAM_RANGE_LEN];
	char		got[32];

	opus_param_format(got, sizeof(got), v);
	return opus_error_set(err, OPUS_ERR_INVALID_ARG, "%s must be %s (got %s)",
						  (unsigned) id < OPUS_P__COUNT ? opus_params[id].name : "parameter",
						  opus_param_range(id, range, sizeof(range)), got);
}

/*
 * The ranges are the table in params.h (NaN is out of range for every
 * bounded field); repeat_last_n is the engine's own (the CLI's).
 */
enum opus_status
opus_sampling_validate(const struct opus_sampling_params *p,
					   struct opus_error *err)
{
	enum opus_param_id bad = OPUS_P__COUNT;
	double		bad_value = 0;

	if (!p)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "sampling parameters missing");
	OPUS_PARAMS_SAMPLING(OPUS_PARAM_CHECK_FIELD)
	if (bad != OPUS_P__COUNT)
		return opus_param_error(err, bad, bad_value);
	if (p->repeat_last_n < -1)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "repeat_last_n must be -1 or more (got %d)",
							  (int) p->repeat_last_n);
	return OPUS_OK;
}

/* ---- RNG: splitmix64 seeding a xoshiro256** generator ---- */

static uint64_t
splitmix64_next(uint64_t *x)
{
	uint64_t	z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline uint64_t
rotl64(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t
xoshiro_next(uint64_t st[4])
{
	uint64_t	result = rotl64(st[1] * 5, 7) * 9;
	uint64_t	t = st[1] << 17;

	st[2] ^= st[0];
	st[3] ^= st[1];
	st[1] ^= st[2];
	st[0] ^= st[3];
	st[2] ^= t;
	st[3] = rotl64(st[3], 45);
	return result;
}

/* Uniform double in [0, 1) with 53 random bits. */
static double
rng_uniform(struct opus_sampler *s)
{
	return (double) (xoshiro_next(s->rng) >> 11) * (1.0 / 9007199254740992.0);
}

enum opus_status
opus_sampler_create(const struct opus_sampling_params *p, int32_t n_vocab,
					struct opus_sampler **out, struct opus_error *err)
{
	struct opus_sampler *s;
	enum opus_status st;
	uint64_t	x;

	*out = NULL;
	st = opus_sampling_validate(p, err);
	if (st != OPUS_OK)
		return st;
	if (n_vocab < 1)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "n_vocab must be positive (got %d)", (int) n_vocab);
	s = calloc(1, sizeof(*s));
	if (!s)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for a sampler");
	s->p = *p;
	s->n_vocab = n_vocab;
	x = p->seed;
	for (int i = 0; i < 4; i++)
		s->rng[i] = splitmix64_next(&x);
	*out = s;
	return OPUS_OK;
}

void
opus_sampler_free(struct opus_sampler *s)
{
	if (!s)
		return;
	free(s->cand);
	free(s->win);
	free(s);
}

/* ---- penalties ---- */

static int
cmp_int32(const void *a, const void *b)
{
	int32_t		x = *(const int32_t *) a;
	int32_t		y = *(const int32_t *) b;

	return (x > y) - (x < y);
}

/*
 * Repetition (llama.cpp: positive logits divided, others multiplied) and
 * presence / frequency (OpenAI: logit -= presence + frequency * count) over
 * the distinct tokens of the last repeat_last_n history entries.  Returns
 * false only when scratch memory cannot be had (penalties are then skipped:
 * the sampler never fails).
 */
static bool
apply_penalties(struct opus_sampler *s, float *logits,
				const int32_t *history, int64_t n_history)
{
	const struct opus_sampling_params *p = &s->p;
	int64_t		n;

	if (p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f &&
		p->frequency_penalty == 0.0f)
		return true;
	if (p->repeat_last_n == 0 || !history || n_history <= 0)
		return true;
	n = (p->repeat_last_n < 0 || p->repeat_last_n > n_history)
		? n_history : p->repeat_last_n;
	if (n > s->win_cap)
	{
		int32_t    *w = realloc(s->win, (size_t) n * sizeof(int32_t));

		if (!w)
			return false;
		s->win = w;
		s->win_cap = n;
	}
	memcpy(s->win, history + (n_history - n), (size_t) n * sizeof(int32_t));
	qsort(s->win, (size_t) n, sizeof(int32_t), cmp_int32);
	for (int64_t i = 0; i < n;)
	{
		int32_t		tok = s->win[i];
		int64_t		j = i;
		float		l;

		while (j < n && s->win[j] == tok)
			j++;
		if (tok >= 0 && tok < s->n_vocab)
		{
			l = logits[tok];
			if (p->repetition_penalty != 1.0f)
				l = l > 0.0f ? l / p->repetition_penalty : l * p->repetition_penalty;
			l -= p->presence_penalty + p->frequency_penalty * (float) (j - i);
			logits[tok] = l;
		}
		i = j;
	}
	return true;
}

/* ---- candidate selection ---- */

/* a ranks before b: higher logit, then lower id.  No NaN reaches here. */
static inline bool
cand_better(const struct opus_cand *a, const struct opus_cand *b)
{
	return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int
cmp_cand_desc(const void *a, const void *b)
{
	const struct opus_cand *x = a;
	const struct opus_cand *y = b;

	return cand_better(x, y) ? -1 : (cand_better(y, x) ? 1 : 0);
}

static bool
reserve_cand(struct opus_sampler *s, int64_t n)
{
	struct opus_cand *c;

	if (n <= s->cand_cap)
		return true;
	c = realloc(s->cand, (size_t) n * sizeof(*c));
	if (!c)
		return false;
	s->cand = c;
	s->cand_cap = n;
	return true;
}

/* Restore the min-heap property (root = worst) below position i. */
static void
heap_sift_down(struct opus_cand *h, int64_t n, int64_t i)
{
	for (;;)
	{
		int64_t		l = 2 * i + 1;
		int64_t		r = l + 1;
		int64_t		w = i;
		struct opus_cand tmp;

		if (l < n && cand_better(&h[w], &h[l]))
			w = l;
		if (r < n && cand_better(&h[w], &h[r]))
			w = r;
		if (w == i)
			return;
		tmp = h[i];
		h[i] = h[w];
		h[w] = tmp;
		i = w;
	}
}

static void
heap_sift_up(struct opus_cand *h, int64_t i)
{
	while (i > 0)
	{
		int64_t		parent = (i - 1) / 2;
		struct opus_cand tmp;

		if (!cand_better(&h[parent], &h[i]))
			return;
		tmp = h[i];
		h[i] = h[parent];
		h[parent] = tmp;
		i = parent;
	}
}

/*
 * Put the best m tokens of logits (m <= n_vocab) into s->cand, sorted best
 * first.  Bounded min-heap when m is small against the vocabulary, a full
 * sort otherwise.  False if memory is short.
 */
static bool
select_top(struct opus_sampler *s, const float *logits, int64_t m)
{
	struct opus_cand *h;
	int64_t		nv = s->n_vocab;

	if (!reserve_cand(s, m))
		return false;
	h = s->cand;
	if (m * 4 >= nv)
	{
		if (!reserve_cand(s, nv))
			return false;
		h = s->cand;
		for (int64_t i = 0; i < nv; i++)
		{
			h[i].id = (int32_t) i;
			h[i].logit = logits[i];
		}
		qsort(h, (size_t) nv, sizeof(*h), cmp_cand_desc);
		return true;
	}
	for (int64_t i = 0; i < nv; i++)
	{
		struct opus_cand c = {.id = (int32_t) i,.logit = logits[i]};

		if (i < m)
		{
			h[i] = c;
			heap_sift_up(h, i);
		}
		else if (cand_better(&c, &h[0]))
		{
			h[0] = c;
			heap_sift_down(h, m, 0);
		}
	}
	qsort(h, (size_t) m, sizeof(*h), cmp_cand_desc);
	return true;
}

/*
 * The length of the minimal prefix of the sorted candidates c[0..n) whose
 * probability mass (weights exp(l - maxv), normalised by z) reaches top_p,
 * or -1 if the n candidates together fall short of it.
 */
static int64_t
nucleus_len(const struct opus_cand *c, int64_t n, float maxv, double z,
			float top_p)
{
	double		target = (double) top_p * z;
	double		cum = 0.0;

	for (int64_t i = 0; i < n; i++)
	{
		cum += (double) expf(c[i].logit - maxv);
		if (cum >= target)
			return i + 1;
	}
	return -1;
}

static inline void
cand_swap(struct opus_cand *c, int64_t i, int64_t j)
{
	struct opus_cand t = c[i];

	c[i] = c[j];
	c[j] = t;
}

/*
 * The minimal nucleus of unsorted candidates c[0..n): reorders c so that
 * c[0..k) are the k best-ranked tokens (higher logit, then lower id) with
 * k the smallest count whose weights exp(l - maxv) sum to target, and
 * returns k (n if even all of them fall short through rounding).  A
 * quickselect on the mass instead of a sort: expected O(n), and the nucleus
 * itself is left unsorted (the draw does not need it sorted).
 */
static int64_t
nucleus_partition(struct opus_cand *c, int64_t n, float maxv, double target)
{
	int64_t		lo = 0;
	int64_t		hi = n;
	double		need = target;
	uint64_t	pick = 0x2545f4914f6cdd1dULL ^ (uint64_t) n;	/* pivot choice only */

	while (lo < hi)
	{
		int64_t		last = hi - 1;
		int64_t		a = lo;
		double		sum_b = 0.0;
		double		wp;
		struct opus_cand pivot;

		/*
		 * A pseudo-random pivot (a fixed sequence, not the request's RNG):
		 * Lomuto partitioning leaves patterns that defeat median-of-three.
		 */
		cand_swap(c, lo + (int64_t) (splitmix64_next(&pick) % (uint64_t) (hi - lo)),
				  last);
		pivot = c[last];
		for (int64_t i = lo; i < last; i++)
		{
			if (cand_better(&c[i], &pivot))
			{
				cand_swap(c, i, a);
				sum_b += (double) expf(c[a].logit - maxv);
				a++;
			}
		}
		cand_swap(c, a, last);
		/* c[lo..a) rank before the pivot, now at c[a]; the rest after */
		if (sum_b >= need)
		{
			hi = a;
			continue;
		}
		wp = (double) expf(pivot.logit - maxv);
		if (sum_b + wp >= need)
			return a + 1;
		need -= sum_b + wp;
		lo = a + 1;
	}
	return n;
}

/*
 * exp(d / temperature) for d = logit - max <= 0.  d == 0 is 1 even when a
 * tiny temperature makes inv_t infinite (0 * inf would be NaN).
 */
static inline float
temp_weight(float d, float inv_t)
{
	if (d == 0.0f)
		return 1.0f;
	return expf(d * inv_t);
}

/* Draw among sorted candidates with weights exp((l - maxv) / temp). */
static int32_t
draw_sparse(struct opus_sampler *s, int64_t n, float maxv)
{
	const struct opus_cand *c = s->cand;
	float		inv_t = 1.0f / s->p.temperature;
	double		sum = 0.0;
	double		u;
	double		cum = 0.0;
	int32_t		last = c[0].id;

	for (int64_t i = 0; i < n; i++)
		sum += (double) temp_weight(c[i].logit - maxv, inv_t);
	u = rng_uniform(s) * sum;
	for (int64_t i = 0; i < n; i++)
	{
		double		w = (double) temp_weight(c[i].logit - maxv, inv_t);

		if (w > 0.0)
			last = c[i].id;
		cum += w;
		if (u < cum)
			return c[i].id;
	}
	return last;				/* rounding: u landed on the very top */
}

/*
 * Draw over the whole row (tokens at -inf excluded), overwriting logits with
 * the weights.
 */
static int32_t
draw_dense(struct opus_sampler *s, float *logits, float maxv, int32_t fallback)
{
	float		inv_t = 1.0f / s->p.temperature;
	double		sum = 0.0;
	double		u;
	double		cum = 0.0;
	int32_t		last = fallback;

	for (int32_t i = 0; i < s->n_vocab; i++)
	{
		float		l = logits[i];
		float		w = temp_weight(l - maxv, inv_t);

		logits[i] = w;
		sum += (double) w;
	}
	u = rng_uniform(s) * sum;
	for (int32_t i = 0; i < s->n_vocab; i++)
	{
		if (logits[i] > 0.0f)
			last = i;
		cum += (double) logits[i];
		if (u < cum)
			return i;
	}
	return last;
}

int32_t
opus_sampler_sample(struct opus_sampler *s, float *logits,
					const int32_t *history, int64_t n_history)
{
	const struct opus_sampling_params *p = &s->p;
	int32_t		nv = s->n_vocab;
	float		maxv = -INFINITY;
	int32_t		argmax = 0;
	int64_t		n_cand = 0;
	bool		sparse = false;

	apply_penalties(s, logits, history, n_history);

	/* NaN -> -inf; argmax with ties to the lowest id */
	for (int32_t i = 0; i < nv; i++)
	{
		float		v = logits[i];

		if (isnan(v))
			logits[i] = v = -INFINITY;
		if (v > maxv)
		{
			maxv = v;
			argmax = i;
		}
	}
	if (maxv == -INFINITY || p->temperature == 0.0f)
		return argmax;
	if (maxv == INFINITY)
	{
		/* only the +inf tokens remain, all equally likely */
		for (int32_t i = 0; i < nv; i++)
			logits[i] = logits[i] == INFINITY ? 0.0f : -INFINITY;
		maxv = 0.0f;
	}

	/* top_k */
	if (p->top_k > 0 && p->top_k < nv)
	{
		if (!select_top(s, logits, p->top_k))
			return argmax;
		n_cand = p->top_k;
		sparse = true;
	}

	/* top_p: the minimal nucleus, over the candidates left */
	if (p->top_p < 1.0f)
	{
		if (sparse)
		{
			double		z = 0.0;
			int64_t		k;

			for (int64_t i = 0; i < n_cand; i++)
				z += (double) expf(s->cand[i].logit - maxv);
			k = nucleus_len(s->cand, n_cand, maxv, z, p->top_p);
			if (k > 0)
				n_cand = k;
		}
		else
		{
			double		z = 0.0;
			int64_t		m = nv < 64 ? nv : 64;
			int64_t		k;

			for (int32_t i = 0; i < nv; i++)
				z += (double) expf(logits[i] - maxv);
			/* usually the nucleus is among the best few dozen */
			if (!select_top(s, logits, m))
				return argmax;
			k = nucleus_len(s->cand, m, maxv, z, p->top_p);
			if (k > 0)
				n_cand = k;
			else if (m == nv)
				n_cand = nv;
			else
			{
				/* a flat distribution: partition every live token by mass */
				int64_t		n = 0;

				if (!reserve_cand(s, nv))
					return argmax;
				for (int32_t i = 0; i < nv; i++)
				{
					if (logits[i] == -INFINITY)
						continue;
					s->cand[n].id = i;
					s->cand[n].logit = logits[i];
					n++;
				}
				n_cand = nucleus_partition(s->cand, n, maxv,
										   (double) p->top_p * z);
			}
			sparse = true;
		}
	}

	/* min_p: keep tokens with p >= min_p * p_max */
	if (p->min_p > 0.0f)
	{
		float		log_min_p = logf(p->min_p);

		if (sparse)
		{
			int64_t		k = 0;

			for (int64_t i = 0; i < n_cand; i++)
				if (s->cand[i].logit - maxv >= log_min_p)
					s->cand[k++] = s->cand[i];
			n_cand = k;			/* >= 1: the max is always kept */
		}
		else
		{
			for (int32_t i = 0; i < nv; i++)
				if (!(logits[i] - maxv >= log_min_p))
					logits[i] = -INFINITY;
		}
	}

	/* temperature, softmax, draw */
	if (sparse)
		return draw_sparse(s, n_cand, maxv);
	return draw_dense(s, logits, maxv, argmax);
}
