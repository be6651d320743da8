/*
 * chat.h - OpenAI-style messages rendered with the model's chat template.
 *
 * The template is identified from tokenizer.chat_template the way llama.cpp
 * detects its built-in templates (substring heuristics on the Jinja source),
 * then rendered by a small C renderer per family.  No Jinja interpreter.
 * An unknown template is OPUS_ERR_UNSUPPORTED unless the caller asks for the
 * documented fallback (ChatML).
 */
#ifndef OPUS_CHAT_H
#define OPUS_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

enum opus_chat_template
{
	OPUS_CHAT_UNKNOWN = 0,
	OPUS_CHAT_CHATML,			/* <|im_start|>role\n...<|im_end|>\n (SmolLM2, Qwen) */
	OPUS_CHAT_LLAMA3,			/* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
	OPUS_CHAT_LLAMA2,			/* [INST] ... [/INST] with <<SYS>> (Llama 2) */
	OPUS_CHAT_MISTRAL,			/* [INST] ... [/INST] Mistral v1/v3 variants */
	OPUS_CHAT_GEMMA,			/* <start_of_turn>user ... <end_of_turn> */
	OPUS_CHAT_PHI3,				/* <|user|>\n...<|end|>\n<|assistant|>\n */
	OPUS_CHAT_ZEPHYR,			/* <|user|>\n...</s>\n (TinyLlama chat) */
	OPUS_CHAT__COUNT
};

struct opus_chat_msg
{
	const char *role;			/* "system", "user", "assistant" */
	const char *content;		/* NUL-terminated UTF-8 */
};

/* Detect from template source (may be NULL: returns OPUS_CHAT_UNKNOWN). */
enum opus_chat_template opus_chat_detect(const char *tmpl, size_t len);
/* By name ("chatml", "llama3", ...), or OPUS_CHAT_UNKNOWN. */
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

#endif							/* OPUS_CHAT_H */
