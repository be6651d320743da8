/*
 * params.c - the request parameter table (params.h) as data, and the one
 * range check and range wording both sides use.  Plain C: linked into the
 * PostgreSQL library and the engine alike.
 */
#include "params.h"

#include <math.h>
#include <stdio.h>

const struct opus_param opus_params[OPUS_P__COUNT] = {
#define OPUS_PARAM_ROW(name_, kind_, lo_, lo_end_, hi_, hi_end_, dflt_, null_means_, zero_, doc_) \
	[OPUS_P_##name_] = {#name_, kind_, lo_, lo_end_, hi_, hi_end_, dflt_, null_means_, zero_, doc_, true},
	OPUS_PARAMS_REQUEST(OPUS_PARAM_ROW)
	OPUS_PARAMS_SAMPLING(OPUS_PARAM_ROW)
	OPUS_PARAMS_TEXTS(OPUS_PARAM_ROW)
	OPUS_PARAMS_ROUTING(OPUS_PARAM_ROW)
	OPUS_PARAMS_CHAT(OPUS_PARAM_ROW)
	OPUS_PARAMS_CONSTRAINT(OPUS_PARAM_ROW)
#undef OPUS_PARAM_ROW
#define OPUS_PARAM_ROW(name_, kind_, lo_, lo_end_, hi_, hi_end_, dflt_, null_means_, zero_, doc_) \
	[OPUS_P_##name_] = {#name_, kind_, lo_, lo_end_, hi_, hi_end_, dflt_, null_means_, zero_, doc_, false},
	OPUS_PARAMS_SESSION(OPUS_PARAM_ROW)
	OPUS_PARAMS_FLAGS(OPUS_PARAM_ROW)
#undef OPUS_PARAM_ROW
};

bool
opus_param_ok(enum opus_param_id id, double v)
{
	const struct opus_param *p;

	if ((unsigned) id >= OPUS_P__COUNT)
		return false;
	p = &opus_params[id];
	if (p->lo_end == OPUS_PARAM_NONE && p->hi_end == OPUS_PARAM_NONE)
		return true;
	/* written so that NaN fails every comparison */
	if (!isfinite(v))
		return false;
	if (p->lo_end == OPUS_PARAM_CLOSED && !(v >= p->lo))
		return false;
	if (p->lo_end == OPUS_PARAM_OPEN && !(v > p->lo))
		return false;
	if (p->hi_end == OPUS_PARAM_CLOSED && !(v <= p->hi))
		return false;
	if (p->hi_end == OPUS_PARAM_OPEN && !(v < p->hi))
		return false;
	return true;
}

void
opus_param_format(char *buf, size_t size, double v)
{
	if (v == floor(v) && fabs(v) < 1e15)
		snprintf(buf, size, "%.0f", v);
	else
		snprintf(buf, size, "%g", v);
}

const char *
opus_param_range(enum opus_param_id id, char *out, size_t size)
{
	const struct opus_param *p;
	char		lo[32];
	char		hi[32];

	if (size == 0)
		return out;
	out[0] = '\0';
	if ((unsigned) id >= OPUS_P__COUNT)
		return out;
	p = &opus_params[id];
	opus_param_format(lo, sizeof(lo), p->lo);
	opus_param_format(hi, sizeof(hi), p->hi);
	if (p->lo_end == OPUS_PARAM_CLOSED && p->hi_end == OPUS_PARAM_CLOSED)
		snprintf(out, size, "between %s and %s", lo, hi);
	else if (p->lo_end == OPUS_PARAM_OPEN && p->hi_end == OPUS_PARAM_CLOSED)
		snprintf(out, size, "greater than %s and at most %s", lo, hi);
	else if (p->lo_end == OPUS_PARAM_CLOSED && p->hi_end == OPUS_PARAM_OPEN)
		snprintf(out, size, "at least %s and less than %s", lo, hi);
	else if (p->lo_end == OPUS_PARAM_OPEN && p->hi_end == OPUS_PARAM_OPEN)
		snprintf(out, size, "greater than %s and less than %s", lo, hi);
	else if (p->lo_end == OPUS_PARAM_CLOSED && p->lo == 0 && p->zero)
		snprintf(out, size, "0 (%s) or positive", p->zero);
	else if (p->lo_end == OPUS_PARAM_CLOSED)
		snprintf(out, size, "at least %s", lo);
	else if (p->lo_end == OPUS_PARAM_OPEN)
		snprintf(out, size, "greater than %s", lo);
	else if (p->hi_end == OPUS_PARAM_CLOSED)
		snprintf(out, size, "at most %s", hi);
	else if (p->hi_end == OPUS_PARAM_OPEN)
		snprintf(out, size, "less than %s", hi);
	else
		snprintf(out, size, "any value");
	return out;
}
