/*
 * buf.h - the engine's growable byte buffer and growable array: malloc'd,
 * capacity doubling, sizes checked for overflow.
 *
 * struct opus_buf holds bytes p[0 .. n); opus_buf_put keeps a NUL at p[n],
 * so text can be used as a C string.  A growth that fails returns false
 * and sets oom; every later put then does nothing and returns false, so a
 * caller may put many pieces and check once (a reserve tries again).  The
 * buffer is zero-initialised ({0}) and freed with opus_buf_free.
 *
 * struct opus_vec holds n elements of elem bytes each; set elem before the
 * first push ({.elem = sizeof(T)}).
 */
#ifndef OPUS_BUF_H
#define OPUS_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct opus_buf
{
	char	   *p;
	size_t		n,
				cap;
	bool		oom;			/* a growth failed: puts do nothing */
};

/* Room for extra more bytes (and the NUL after them).  False when out of memory. */
static inline bool
opus_buf_reserve(struct opus_buf *b, size_t extra)
{
	size_t		need;

	if (__builtin_add_overflow(b->n, extra, &need) || need == SIZE_MAX)
	{
		b->oom = true;
		return false;
	}
	need++;
	if (need > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 64;
		char	   *p;

		while (cap < need)
		{
			if (cap > SIZE_MAX / 2)
			{
				b->oom = true;
				return false;
			}
			cap *= 2;
		}
		p = realloc(b->p, cap);
		if (!p)
		{
			b->oom = true;
			return false;
		}
		b->p = p;
		b->cap = cap;
	}
	return true;
}

/* Append n bytes of s. */
static inline bool
opus_buf_put(struct opus_buf *b, const void *s, size_t n)
{
	if (b->oom || !opus_buf_reserve(b, n))
		return false;
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
	return true;
}

/* Drop the first n bytes (n <= b->n). */
static inline void
opus_buf_consume(struct opus_buf *b, size_t n)
{
	memmove(b->p, b->p + n, b->n - n);
	b->n -= n;
}

static inline void
opus_buf_free(struct opus_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

struct opus_vec
{
	void	   *p;
	size_t		n,
				cap,
				elem;
};

/* A new element at the end (uninitialised), or NULL when out of memory. */
static inline void *
opus_vec_push(struct opus_vec *v)
{
	if (v->n == v->cap)
	{
		size_t		cap = v->cap ? v->cap * 2 : 32;
		void	   *p;

		if (cap > SIZE_MAX / v->elem)
			return NULL;
		p = realloc(v->p, cap * v->elem);
		if (!p)
			return NULL;
		v->p = p;
		v->cap = cap;
	}
	return (char *) v->p + v->elem * v->n++;
}

/* Capacity for at least n elements. */
static inline bool
opus_vec_reserve(struct opus_vec *v, size_t n)
{
	if (n > v->cap)
	{
		void	   *p;

		if (n > SIZE_MAX / v->elem)
			return false;
		p = realloc(v->p, n * v->elem);
		if (!p)
			return false;
		v->p = p;
		v->cap = n;
	}
	return true;
}

#endif							/* OPUS_BUF_H */
