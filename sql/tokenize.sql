-- tokenize: the model's tokenizer, and the round trip.
SELECT opus_tokenize('Hello world');
SELECT opus_tokenize('The capital of France is Paris.');
SELECT opus_tokenize('');
SELECT opus_detokenize(opus_tokenize('Hello world'));
SELECT opus_detokenize('{}'::int[]);
-- Round trips, including non-ASCII text and whitespace.
SELECT t, opus_detokenize(opus_tokenize(t)) = t AS round_trip
FROM (VALUES ('Hello world'),
             ('  leading and trailing spaces  '),
             (E'tabs\tand\nnewlines'),
             ('Ünïcödé — ελληνικά — 日本語 — emoji 🎉'),
             ('SELECT * FROM t WHERE x = 42;')) AS v(t);
-- Special-token text is tokenized as plain text, not as the special token.
SELECT array_length(opus_tokenize('<|im_start|>'), 1) > 1 AS not_special;
-- The number of tokens matches the usage the engine reports.
SELECT array_length(opus_tokenize('The capital of France is'), 1)
     = (opus_completion('The capital of France is', max_tokens => 1, temperature => 0)->'usage'->>'prompt_tokens')::int AS counts_agree;
