/*
 * chat.h - OpenAI-style messages rendered with the model's chat template.
 *
 * The template is identified from tokenizer.chat_template the way llama.cpp
 * detects its built-in templates (substring heuristics on the Jinja source,
 * or an exact built-in name such as "chatml"), then rendered by a small C
 * renderer per family, byte for byte as llama.cpp's llama_chat_apply_template
 * renders it (test/golden/chat/ holds goldens made with it).  These families
 * are the fallback: the engine renders with the model's own Jinja template
 * (struct opus_chat_renderer below, chat_jinja.c, jinja.h) and uses a
 * family only when that is impossible.
 *
 * Unknown templates: opus_chat_detect() returns OPUS_CHAT_UNKNOWN for a
 * template it does not recognise (or one of llama.cpp's families that is not
 * implemented here), and opus_chat_render(OPUS_CHAT_UNKNOWN, ...) is
 * OPUS_ERR_UNSUPPORTED.  The documented fallback is ChatML: a caller that
 * wants to serve such a model anyway renders with OPUS_CHAT_CHATML
 * explicitly (as llama.cpp does when a model has no template at all).
 */
#ifndef OPUS_CHAT_H
#define OPUS_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "base/status.h"

enum opus_chat_template
{
	OPUS_CHAT_UNKNOWN = 0,
	OPUS_CHAT_CHATML,			/* <|im_start|>role\n...<|im_end|>\n (SmolLM2, Qwen) */
	OPUS_CHAT_LLAMA3,			/* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
	OPUS_CHAT_LLAMA2,			/* [INST] ... [/INST], system without <<SYS>> */
	OPUS_CHAT_MISTRAL,			/* [INST] ... [/INST] Mistral v3 ("mistral-v3") */
	OPUS_CHAT_GEMMA,			/* <start_of_turn>user ... <end_of_turn> */
	OPUS_CHAT_PHI3,				/* <|user|>\n...<|end|>\n<|assistant|>\n */
	OPUS_CHAT_ZEPHYR,			/* <|user|>\n...<|endoftext|>\n */
	/* variants llama.cpp distinguishes (appended; values above are stable) */
	OPUS_CHAT_LLAMA2_SYS,		/* llama2 with <<SYS>> system block */
	OPUS_CHAT_LLAMA2_SYS_BOS,	/* ... and <s> before each later [INST] */
	OPUS_CHAT_LLAMA2_SYS_STRIP, /* ... with message contents trimmed */
	OPUS_CHAT_MISTRAL_V1,		/* " [INST] ... [/INST]" */
	OPUS_CHAT_MISTRAL_V3_TEKKEN,	/* "[INST]...[/INST]" without spaces */
	OPUS_CHAT_MISTRAL_V7,		/* [SYSTEM_PROMPT] ... [INST] ... */
	OPUS_CHAT_MISTRAL_V7_TEKKEN,
	OPUS_CHAT_FALCON3,			/* <|user|>\n...\n (also TinyLlama's </s> template) */
	OPUS_CHAT__COUNT
};

struct opus_chat_msg
{
	const char *role;			/* "system", "user", "assistant" */
	const char *content;		/* NUL-terminated UTF-8 */
	/*
	 * NULL, or the message's other members as a NUL-terminated JSON object
	 * (OpenAI's tool_calls of an assistant message, tool_call_id of a tool
	 * message, ...): the Jinja renderer hands the template the message
	 * {"role": role, "content": content, <members>}, a member "content"
	 * (null) replacing content; the fallback families ignore them
	 */
	const char *members;
};

/* Detect from template source (may be NULL: returns OPUS_CHAT_UNKNOWN). */
enum opus_chat_template opus_chat_detect(const char *tmpl, size_t len);
/* By llama.cpp's name ("chatml", "llama3", "mistral-v3", ...), or OPUS_CHAT_UNKNOWN. */
enum opus_chat_template opus_chat_from_name(const char *name);
const char *opus_chat_name(enum opus_chat_template t);

/*
 * Render messages.  Roles other than system/user/assistant, an empty message
 * list, or a template that cannot express the sequence (e.g. a system message
 * for a template without one where llama.cpp would refuse) give
 * OPUS_ERR_TEMPLATE.  add_generation_prompt appends the assistant header.
 * *out is malloc'd and NUL-terminated; the result is meant to be tokenized
 * with add_special = true and parse_special = true, as llama.cpp's server
 * does (the renderer never writes BOS itself).
 */
enum opus_status opus_chat_render(enum opus_chat_template t,
								  const struct opus_chat_msg *msgs, int n_msgs,
								  bool add_generation_prompt,
								  char **out, size_t *out_len,
								  struct opus_error *err);

/*
 * The renderer the engine uses (chat_jinja.c): the model's own Jinja
 * template executed by the interpreter in jinja.h, as Hugging Face's
 * apply_chat_template renders it; the pattern families above are the
 * fallback for a model without a template, or whose template the
 * interpreter cannot parse (an unsupported filter or statement, a
 * malformed file), and, per request, for a render that reaches something
 * unsupported at run time.  A template's own errors (raise_exception for a
 * role it refuses, a limit reached) are OPUS_ERR_TEMPLATE, not a fallback.
 */
struct opus_chat_renderer;

/*
 * tmpl may be NULL (no template: ChatML).  bos / eos are the texts of the
 * model's BOS / EOS tokens ("" when none), the template's bos_token and
 * eos_token; strip_bos: the tokenizer adds BOS itself, so a rendered text
 * that starts with bos_token loses it (as llama.cpp does with --jinja).
 * Fails only for out-of-memory.
 */
enum opus_status opus_chat_renderer_create(const char *tmpl, size_t len,
										   const char *bos, const char *eos,
										   bool strip_bos,
										   struct opus_chat_renderer **out,
										   struct opus_error *err);
/* The same with bos / eos / strip_bos taken from the model's tokenizer. */
struct opus_tokenizer;
enum opus_status opus_chat_renderer_for_tokenizer(const char *tmpl, size_t len,
												  const struct opus_tokenizer *tok,
												  struct opus_chat_renderer **out,
												  struct opus_error *err);
void		opus_chat_renderer_free(struct opus_chat_renderer *r);
/* strftime_now's clock for this renderer (UTC; 0, the default: the current
 * time); for tests that compare with a fixed-clock oracle */
void		opus_chat_renderer_set_clock(struct opus_chat_renderer *r, time_t now);
/* "jinja", or the fallback family's name (opus_chat_name) */
const char *opus_chat_renderer_name(const struct opus_chat_renderer *r);
/* why the fallback was taken ("" for jinja): for the engine log */
const char *opus_chat_renderer_why(const struct opus_chat_renderer *r);

/*
 * Render messages; tools_json (may be NULL) is a JSON array of OpenAI-style
 * tool definitions handed to the template as `tools` (null when NULL).  A
 * fallback render ignores tools and members.  A message's members that are
 * not one JSON object are OPUS_ERR_INVALID_ARG.  *out is malloc'd and
 * NUL-terminated.
 */
enum opus_status opus_chat_renderer_apply(const struct opus_chat_renderer *r,
										  const struct opus_chat_msg *msgs, int n_msgs,
										  const char *tools_json, size_t tools_len,
										  bool add_generation_prompt,
										  char **out, size_t *out_len,
										  struct opus_error *err);

/*
 * The engine's chat prompt (chat_literal.c): msgs rendered as by
 * opus_chat_renderer_apply, and in *literal (*n_literal spans, malloc'd,
 * may be NULL / 0) the byte ranges of user text (message contents, and
 * special-token text inside tools and members) that must be tokenized as
 * plain text (opus_tokenizer_encode_spans).  allow_special: the session
 * lets user text give special tokens (no spans).  User text with
 * special-token text that a template changes so that it cannot be found
 * again is OPUS_ERR_TEMPLATE.
 */
struct opus_text_span;
enum opus_status opus_chat_render_literal(const struct opus_chat_renderer *r,
										  const struct opus_tokenizer *tok,
										  const struct opus_chat_msg *msgs, int n_msgs,
										  const char *tools, size_t tools_len,
										  bool allow_special, bool add_generation_prompt,
										  char **text, size_t *text_len,
										  struct opus_text_span **literal, int *n_literal,
										  struct opus_error *err);

#endif							/* OPUS_CHAT_H */
