/*
 * chat.c - chat template detection and rendering, as llama.cpp's built-in
 * (non-Jinja) templates do it.
 *
 * Detection follows llama.cpp's llm_chat_detect_template: an exact built-in
 * name wins, otherwise substring tests on the Jinja source in a fixed order.
 * Families llama.cpp knows but this file does not render (phi4, command-r,
 * deepseek, ...) are still recognised in their place in that order, so that
 * they come out as OPUS_CHAT_UNKNOWN instead of being mistaken for a later
 * family.  Rendering is byte-for-byte llama_chat_apply_template; the goldens
 * in test/golden/chat/ are made with it.
 */
#include "text/chat.h"

#include <stdlib.h>
#include <string.h>

static const char *const names[OPUS_CHAT__COUNT] = {
	[OPUS_CHAT_UNKNOWN] = "unknown",
	[OPUS_CHAT_CHATML] = "chatml",
	[OPUS_CHAT_LLAMA3] = "llama3",
	[OPUS_CHAT_LLAMA2] = "llama2",
	[OPUS_CHAT_MISTRAL] = "mistral-v3",
	[OPUS_CHAT_GEMMA] = "gemma",
	[OPUS_CHAT_PHI3] = "phi3",
	[OPUS_CHAT_ZEPHYR] = "zephyr",
	[OPUS_CHAT_LLAMA2_SYS] = "llama2-sys",
	[OPUS_CHAT_LLAMA2_SYS_BOS] = "llama2-sys-bos",
	[OPUS_CHAT_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
	[OPUS_CHAT_MISTRAL_V1] = "mistral-v1",
	[OPUS_CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
	[OPUS_CHAT_MISTRAL_V7] = "mistral-v7",
	[OPUS_CHAT_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
	[OPUS_CHAT_FALCON3] = "falcon3",
};

const char *
opus_chat_name(enum opus_chat_template t)
{
	if ((int) t < 0 || t >= OPUS_CHAT__COUNT)
		return "unknown";
	return names[t];
}

enum opus_chat_template
opus_chat_from_name(const char *name)
{
	if (name == NULL)
		return OPUS_CHAT_UNKNOWN;
	for (int i = 1; i < OPUS_CHAT__COUNT; i++)
		if (strcmp(names[i], name) == 0)
			return (enum opus_chat_template) i;
	return OPUS_CHAT_UNKNOWN;
}

struct src
{
	const char *s;
	size_t		n;
};

static bool
has(const struct src *t, const char *needle)
{
	return memmem(t->s, t->n, needle, strlen(needle)) != NULL;
}

enum opus_chat_template
opus_chat_detect(const char *tmpl, size_t len)
{
	struct src	t = {tmpl, len};
	char		name[32];

	if (tmpl == NULL)
		return OPUS_CHAT_UNKNOWN;
	/* a built-in name */
	if (len < sizeof(name) && memchr(tmpl, '\0', len) == NULL)
	{
		enum opus_chat_template byname;

		memcpy(name, tmpl, len);
		name[len] = '\0';
		byname = opus_chat_from_name(name);
		if (byname != OPUS_CHAT_UNKNOWN)
			return byname;
	}

	if (has(&t, "<|im_start|>"))
	{
		if (has(&t, "<|im_sep|>") || has(&t, "<end_of_utterance>"))
			return OPUS_CHAT_UNKNOWN;	/* phi4, smolvlm */
		return OPUS_CHAT_CHATML;
	}
	if ((len >= 7 && memcmp(tmpl, "mistral", 7) == 0) || has(&t, "[INST]"))
	{
		if (has(&t, "[SYSTEM_PROMPT]"))
			return OPUS_CHAT_MISTRAL_V7;
		if (has(&t, "' [INST] ' + system_message") || has(&t, "[AVAILABLE_TOOLS]"))
		{
			if (has(&t, " [INST]"))
				return OPUS_CHAT_MISTRAL_V1;
			if (has(&t, "\"[INST]\""))
				return OPUS_CHAT_MISTRAL_V3_TEKKEN;
			return OPUS_CHAT_MISTRAL;
		}
		if (has(&t, "content.strip()"))
			return OPUS_CHAT_LLAMA2_SYS_STRIP;
		if (has(&t, "bos_token + '[INST]"))
			return OPUS_CHAT_LLAMA2_SYS_BOS;
		if (has(&t, "<<SYS>>"))
			return OPUS_CHAT_LLAMA2_SYS;
		return OPUS_CHAT_LLAMA2;
	}
	if (has(&t, "<|assistant|>") && has(&t, "<|end|>"))
		return OPUS_CHAT_PHI3;
	if (has(&t, "[gMASK]<sop>"))
		return OPUS_CHAT_UNKNOWN;	/* chatglm4 */
	if (has(&t, "<|assistant|>") && has(&t, "<|user|>"))
		return has(&t, "</s>") ? OPUS_CHAT_FALCON3 : OPUS_CHAT_UNKNOWN;	/* glmedge */
	if (has(&t, "<|{{ item['role'] }}|>") && has(&t, "<|begin_of_image|>"))
		return OPUS_CHAT_UNKNOWN;	/* glmedge */
	if (has(&t, "<|user|>") && has(&t, "<|endoftext|>"))
		return OPUS_CHAT_ZEPHYR;
	if (has(&t, "bos_token + message['role']"))
		return OPUS_CHAT_UNKNOWN;	/* monarch */
	if (has(&t, "<start_of_turn>"))
		return OPUS_CHAT_GEMMA;
	if (has(&t, "'\\n\\nAssistant: ' + eos_token") ||	/* orion */
		has(&t, "GPT4 Correct ") || /* openchat */
		(has(&t, "USER: ") && has(&t, "ASSISTANT: ")) ||	/* vicuna */
		(has(&t, "### Instruction:") && has(&t, "<|EOT|>")) ||	/* deepseek */
		(has(&t, "<|START_OF_TURN_TOKEN|>") && has(&t, "<|USER_TOKEN|>")))	/* command-r */
		return OPUS_CHAT_UNKNOWN;
	if (has(&t, "<|start_header_id|>") && has(&t, "<|end_header_id|>"))
		return OPUS_CHAT_LLAMA3;
	return OPUS_CHAT_UNKNOWN;
}

/* ---------------------------------------------------------- rendering */

struct out
{
	char	   *p;
	size_t		n,
				cap;
	bool		oom;
};

static void
put_n(struct out *o, const char *s, size_t n)
{
	if (o->oom)
		return;
	if (o->n + n + 1 > o->cap)
	{
		size_t		cap = o->cap ? o->cap : 256;
		char	   *p;

		while (cap < o->n + n + 1)
			cap *= 2;
		p = realloc(o->p, cap);
		if (!p)
		{
			o->oom = true;
			return;
		}
		o->p = p;
		o->cap = cap;
	}
	memcpy(o->p + o->n, s, n);
	o->n += n;
	o->p[o->n] = '\0';
}

static void
put(struct out *o, const char *s)
{
	put_n(o, s, strlen(s));
}

static bool
is_c_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* s with leading and trailing C-locale whitespace removed. */
static void
put_trim(struct out *o, const char *s)
{
	size_t		a = 0,
				b = strlen(s);

	while (a < b && is_c_space(s[a]))
		a++;
	while (b > a && is_c_space(s[b - 1]))
		b--;
	put_n(o, s + a, b - a);
}

static bool
is_role(const char *r, const char *want)
{
	return strcmp(r, want) == 0;
}

static void
render_llama2(struct out *o, enum opus_chat_template t,
			  const struct opus_chat_msg *m, int n)
{
	bool		sys = t != OPUS_CHAT_LLAMA2;
	bool		bos_inside = t == OPUS_CHAT_LLAMA2_SYS_BOS;
	bool		strip = t == OPUS_CHAT_LLAMA2_SYS_STRIP;
	bool		inside = true;	/* no BOS before the first turn */

	put(o, "[INST] ");
	for (int i = 0; i < n; i++)
	{
		if (!inside)
		{
			inside = true;
			put(o, bos_inside ? "<s>[INST] " : "[INST] ");
		}
		if (is_role(m[i].role, "system"))
		{
			if (sys)
				put(o, "<<SYS>>\n");
			strip ? put_trim(o, m[i].content) : put(o, m[i].content);
			put(o, sys ? "\n<</SYS>>\n\n" : "\n");
		}
		else if (is_role(m[i].role, "user"))
		{
			strip ? put_trim(o, m[i].content) : put(o, m[i].content);
			put(o, " [/INST]");
		}
		else
		{
			strip ? put_trim(o, m[i].content) : put(o, m[i].content);
			put(o, "</s>");
			inside = false;
		}
	}
}

static void
render_mistral(struct out *o, enum opus_chat_template t,
			   const struct opus_chat_msg *m, int n)
{
	const char *lead = t == OPUS_CHAT_MISTRAL_V1 ? " " : "";
	const char *trail = t == OPUS_CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
	bool		inside = false;

	for (int i = 0; i < n; i++)
	{
		if (!inside)
		{
			put(o, lead);
			put(o, "[INST]");
			put(o, trail);
			inside = true;
		}
		if (is_role(m[i].role, "system"))
		{
			put(o, m[i].content);
			put(o, "\n\n");
		}
		else if (is_role(m[i].role, "user"))
		{
			put(o, m[i].content);
			put(o, lead);
			put(o, "[/INST]");
		}
		else
		{
			put(o, trail);
			if (t == OPUS_CHAT_MISTRAL)
				put_trim(o, m[i].content);
			else
				put(o, m[i].content);
			put(o, "</s>");
			inside = false;
		}
	}
}

static void
render_mistral_v7(struct out *o, enum opus_chat_template t,
				  const struct opus_chat_msg *m, int n)
{
	const char *sp = t == OPUS_CHAT_MISTRAL_V7 ? " " : "";

	for (int i = 0; i < n; i++)
	{
		if (is_role(m[i].role, "system"))
		{
			put(o, "[SYSTEM_PROMPT]");
			put(o, sp);
			put(o, m[i].content);
			put(o, "[/SYSTEM_PROMPT]");
		}
		else if (is_role(m[i].role, "user"))
		{
			put(o, "[INST]");
			put(o, sp);
			put(o, m[i].content);
			put(o, "[/INST]");
		}
		else
		{
			put(o, sp);
			put(o, m[i].content);
			put(o, "</s>");
		}
	}
}

static void
render_gemma(struct out *o, const struct opus_chat_msg *m, int n, bool gen)
{
	struct out	sys = {0};

	for (int i = 0; i < n; i++)
	{
		bool		model = is_role(m[i].role, "assistant");

		if (is_role(m[i].role, "system"))
		{
			/* no system turn: merged into the next user turn */
			put_trim(&sys, m[i].content);
			continue;
		}
		put(o, "<start_of_turn>");
		put(o, model ? "model" : m[i].role);
		put(o, "\n");
		if (sys.n > 0 && !model)
		{
			put_n(o, sys.p, sys.n);
			put(o, "\n\n");
			sys.n = 0;
		}
		put_trim(o, m[i].content);
		put(o, "<end_of_turn>\n");
	}
	if (sys.oom)
		o->oom = true;
	free(sys.p);
	if (gen)
		put(o, "<start_of_turn>model\n");
}

/* "<|role|>\n" content end, for phi3, zephyr and falcon3 */
static void
render_pipe_roles(struct out *o, const struct opus_chat_msg *m, int n,
				  const char *end, bool gen)
{
	for (int i = 0; i < n; i++)
	{
		put(o, "<|");
		put(o, m[i].role);
		put(o, "|>\n");
		put(o, m[i].content);
		put(o, end);
	}
	if (gen)
		put(o, "<|assistant|>\n");
}

enum opus_status
opus_chat_render(enum opus_chat_template t, const struct opus_chat_msg *msgs,
				 int n_msgs, bool add_generation_prompt, char **out,
				 size_t *out_len, struct opus_error *err)
{
	struct out	o = {0};

	*out = NULL;
	if (out_len)
		*out_len = 0;
	if ((int) t <= OPUS_CHAT_UNKNOWN || t >= OPUS_CHAT__COUNT)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED, "unsupported chat template");
	if (n_msgs <= 0 || msgs == NULL)
		return opus_error_set(err, OPUS_ERR_TEMPLATE, "no messages");
	for (int i = 0; i < n_msgs; i++)
	{
		const char *r = msgs[i].role;

		if (r == NULL || msgs[i].content == NULL)
			return opus_error_set(err, OPUS_ERR_TEMPLATE,
								  "message %d has no role or no content", i);
		if (!is_role(r, "system") && !is_role(r, "user") && !is_role(r, "assistant"))
			return opus_error_set(err, OPUS_ERR_TEMPLATE,
								  "message %d has role \"%.32s\"; expected system, user or assistant",
								  i, r);
	}

	switch (t)
	{
		case OPUS_CHAT_CHATML:
			for (int i = 0; i < n_msgs; i++)
			{
				put(&o, "<|im_start|>");
				put(&o, msgs[i].role);
				put(&o, "\n");
				put(&o, msgs[i].content);
				put(&o, "<|im_end|>\n");
			}
			if (add_generation_prompt)
				put(&o, "<|im_start|>assistant\n");
			break;
		case OPUS_CHAT_LLAMA3:
			for (int i = 0; i < n_msgs; i++)
			{
				put(&o, "<|start_header_id|>");
				put(&o, msgs[i].role);
				put(&o, "<|end_header_id|>\n\n");
				put_trim(&o, msgs[i].content);
				put(&o, "<|eot_id|>");
			}
			if (add_generation_prompt)
				put(&o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
			break;
		case OPUS_CHAT_LLAMA2:
		case OPUS_CHAT_LLAMA2_SYS:
		case OPUS_CHAT_LLAMA2_SYS_BOS:
		case OPUS_CHAT_LLAMA2_SYS_STRIP:
			render_llama2(&o, t, msgs, n_msgs);
			break;
		case OPUS_CHAT_MISTRAL:
		case OPUS_CHAT_MISTRAL_V1:
		case OPUS_CHAT_MISTRAL_V3_TEKKEN:
			render_mistral(&o, t, msgs, n_msgs);
			break;
		case OPUS_CHAT_MISTRAL_V7:
		case OPUS_CHAT_MISTRAL_V7_TEKKEN:
			render_mistral_v7(&o, t, msgs, n_msgs);
			break;
		case OPUS_CHAT_GEMMA:
			render_gemma(&o, msgs, n_msgs, add_generation_prompt);
			break;
		case OPUS_CHAT_PHI3:
			render_pipe_roles(&o, msgs, n_msgs, "<|end|>\n", add_generation_prompt);
			break;
		case OPUS_CHAT_ZEPHYR:
			render_pipe_roles(&o, msgs, n_msgs, "<|endoftext|>\n", add_generation_prompt);
			break;
		case OPUS_CHAT_FALCON3:
			render_pipe_roles(&o, msgs, n_msgs, "\n", add_generation_prompt);
			break;
		default:
			return opus_error_set(err, OPUS_ERR_UNSUPPORTED, "unsupported chat template");
	}
	if (o.oom)
	{
		free(o.p);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory rendering chat");
	}
	if (o.p == NULL)
	{
		o.p = malloc(1);
		if (!o.p)
			return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory rendering chat");
		o.p[0] = '\0';
	}
	*out = o.p;
	if (out_len)
		*out_len = o.n;
	return OPUS_OK;
}
