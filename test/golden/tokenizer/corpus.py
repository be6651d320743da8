"""
corpus.py - the strings the tokenizer goldens are made from.

CORPUS is a list of bytes objects (so invalid UTF-8 can be expressed).  It
covers plain English, contractions, whitespace runs (spaces, tabs, newlines,
CR), digits and long numbers, accented Latin, Greek, Cyrillic, Arabic,
Hebrew, Devanagari, Thai, CJK, emoji (incl. ZWJ sequences and flags),
combining marks, Unicode spaces, code in several languages, special-token
text, the empty string and invalid UTF-8.  Order is stable: goldens refer to
entries by position only through the generated file, so appending is safe.
"""

_TEXT = [
    "",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\r\n",
    " \n",
    "\n ",
    "a",
    "A",
    "Hello",
    "Hello world",
    " Hello world",
    "Hello world ",
    "Hello  world",
    "Hello   world",
    "Hello\tworld",
    "Hello\nworld",
    "Hello\n\nworld",
    "Hello \n world",
    "Hello\r\nworld",
    "hello, world!",
    "Hello, World! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "I'm here", "I'M HERE", "don't", "DON'T", "they're", "THEY'RE", "we've",
    "WE'VE", "he'll", "HE'LL", "she'd", "SHE'D", "it's", "IT'S", "'s", "'t",
    "'re", "'ve", "'m", "'ll", "'d", "'", "''", "'x", "O'Neil's", "rock 'n' roll",
    "It's 5 o'clock",
    "\"quoted\" text",
    "a 'single' b",
    "a ' b",
    "hello ?", "hello !", "hello .", "hello ,", "it 's", "it 'm", "it 're",
    "it 've", "it 't", "it 'd", "it 'll",
    "1", "12", "123", "1234", "12345", "123456", "1234567", "1234567890",
    "3.14159", "-42", "+7", "1,000,000", "1 000 000", "v2.0.1", "0x1F",
    "0b1010", "1e-9", "2024-01-31", "12:34:56", "+1 (555) 123-4567",
    "99999999999999999999999999999999",
    "a1b2c3", "abc123def", " 123", "word 42 words",
    "\u0661\u0662\u0663",          # Arabic-Indic digits
    "\u0967\u0968\u0969",          # Devanagari digits
    "\u00b2\u00b3\u00b9",          # superscripts (No)
    "\u2162\u216b",                # Roman numerals (Nl)
    "\uff11\uff12\uff13",          # fullwidth digits
    "\u00bd + \u00bc",             # vulgar fractions
    "caf\u00e9", "na\u00efve", "\u00dcn\u00efc\u00f6d\u00e9", "Stra\u00dfe",
    "fa\u00e7ade r\u00e9sum\u00e9", "Se\u00f1or Pe\u00f1a", "\u00c5ngstr\u00f6m",
    "e\u0301", "cafe\u0301", "a\u0308o\u0308u\u0308",
    "\u0391\u03b8\u03ae\u03bd\u03b1",  # Greek
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",  # Russian
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",  # Arabic
    "\u0627\u0644\u0633\u0644\u0627\u0645 \u0639\u0644\u064a\u0643\u0645 123",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",  # Hebrew
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",  # Hindi
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",  # Thai
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uc0c1",  # Korean
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c",  # Japanese
    "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",  # Chinese + fullwidth punct
    "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8",
    "\u4e2d\u6587 English \u6df7\u5408 text",
    "\u1f00\u1f10 \u10d0\u10d1\u10d2",  # polytonic Greek, Georgian
    "\u0531\u0532\u0533 \u0562\u0561\u0580\u0565\u0582",  # Armenian
    "\u1200\u1208\u1218",              # Ethiopic
    "\U0001F600", "\U0001F600\U0001F601\U0001F602", "I \u2764\ufe0f NY",
    "\U0001F44D\U0001F3FD", "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466",
    "\U0001F1FA\U0001F1F8 \U0001F1EF\U0001F1F5", "smile \U0001F60A!",
    "\u2603 \u2601 \u2602", "\u2705 done", "\U0001F680\U0001F680 launch",
    "\u00a9 2024 \u00ae \u2122", "\u20ac100 \u00a350 \u00a5300 $20",
    "\u2190 \u2192 \u2191 \u2193", "\u221e \u2211 \u222b \u221a", "\u03b1 + \u03b2 = \u03b3",
    "x\u00b2 + y\u00b2 = z\u00b2",
    "\u2014 em dash \u2013 en dash", "\u201cquotes\u201d \u2018single\u2019",
    "\u2026 ellipsis", "\u00bfQu\u00e9? \u00a1S\u00ed!",
    "a\u00a0b", "a\u3000b", "a\u2003b", "a\u2028b", "a\u2029b", "a\u0085b",
    "a\u200bb", "\ufeffBOM", "a\u00adb", "tab\u00a0\u00a0two",
    "\u00a0leading nbsp", "trailing nbsp\u00a0",
    "\x00", "a\x00b", "\x01\x02\x03", "\x7f", "\x1b[31mred\x1b[0m", "\x0b\x0c",
    "\x1c\x1d\x1e\x1f",
    "    indented", "\tindented", "\t\tdouble tab", "trailing   ", "trailing\t",
    "trailing\n", "a \t b", "a\t \tb", "a \n\n b", "a\n \nb", "  \n  \n  ",
    "a" + " " * 10 + "b", " " * 50, "\t" * 8, "\n" * 10, "x" + "\n" * 5 + "y",
    " \r\n \r\n", "\r", "\r\r\n\n", "line1\nline2\nline3", "a\r\nb\r\nc",
    "!!!", "???", "...", "---", "***", "___", "===", "~~~", "```", "###",
    "@#$%^&*()", "<>", "{}[]()", "a+b=c", "x<y>z", "a|b|c", "a^b", "~tilde",
    "`backtick`", "$var", "100%", "#hashtag", "@mention", "a&b", "c:\\path\\to",
    "/usr/local/bin", "https://example.com/path?q=1&r=two#frag",
    "user@example.com", "192.168.0.1", "::1", "C++ and C#", "->", "=>", "::",
    "!=", "==", "<=", ">=", "&&", "||", "//", "/*", "*/", "#!", "...\n",
    "def f(x):\n    return x * 2\n",
    "def greet(name: str) -> str:\n    return f\"Hello, {name}!\"\n\nprint(greet('world'))\n",
    "class Foo(object):\n\tdef __init__(self):\n\t\tself.x = [1, 2, 3]\n",
    "for (int i = 0; i < n; i++) {\n    sum += a[i];\n}\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "{\"key\": \"value\", \"list\": [1, 2.5, null, true], \"nested\": {\"a\": {}}}",
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "fn main() {\n    let v: Vec<i32> = (0..10).map(|x| x * x).collect();\n}\n",
    "if [ -f \"$HOME/.bashrc\" ]; then source ~/.bashrc; fi",
    "const add = (a, b) => a + b; // arrow\n",
    "x = {'a': 1, 'b': [2, 3]}  # dict\n",
    "    \n    \n",
    "# Title\n\n## Subtitle\n\n- item 1\n- item 2\n\n```python\nprint('hi')\n```\n",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "^[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}$",
    "\\n is a newline, \\t is a tab",
    "camelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case",
    "don't_split_me", "HTTPServer", "iPhone", "eBay", "McDonald's",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user",
    "<|im_start|>user\nHello!<|im_end|>\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_end|>", "<|im_start|> <|im_end|>", "<|im_start|>\n<|im_end|>",
    "text<|im_end|>text", "text <|im_end|> text", "<<|im_end|>>", "<|im_start",
    "im_start|>", "<|im_start|x>", "<|IM_START|>", "<|im_end|><|im_end|><|im_end|>",
    "<|endoftext|>Hello<|endoftext|>", "<reponame>repo<filename>a.py",
    "<s>", "</s>", "<unk>", "<s>Hello</s>", "[INST] hi [/INST]",
    "<|user|>\nhi</s>\n<|assistant|>\n", "<start_of_turn>user\nhi<end_of_turn>",
    "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "\u2581leading block", "a\u2581b", "\u2581\u2581",
    "Mixed \u00e9\u00e8 and \U0001F600 with 123 and \u4e2d\u6587 and 'quotes'.",
    "ALL CAPS SENTENCE WITH NUMBERS 2024 AND SYMBOLS !@#",
    "lowercase sentence with trailing spaces   ",
    "Tabs\tand\tspaces  mixed \t together",
    "emoji\U0001F600in\U0001F601the\U0001F602middle",
    "\U0001F600 \U0001F600  \U0001F600",
    "a.b,c;d:e!f?g", "(parenthetical) [bracketed] {braced}",
    "It was the best of times, it was the worst of times.",
    "To be, or not to be, that is the question:",
    "She sells sea-shells on the sea-shore.",
    "Supercalifragilisticexpialidocious",
    "antidisestablishmentarianism",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "ab" * 40, "abc " * 20, "1" * 64, "12 " * 20, "\U0001F600" * 10,
    "\u4e2d" * 20, "=" * 30, "-" * 80, "." * 25,
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis "
    "nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat. "
    "Duis aute irure dolor in reprehenderit in voluptate velit esse cillum dolore eu "
    "fugiat nulla pariatur. Excepteur sint occaecat cupidatat non proident, sunt in "
    "culpa qui officia deserunt mollit anim id est laborum.",
]

# Invalid or unusual UTF-8, as raw bytes.
_BYTES = [
    b"\xff", b"\xfe\xff", b"\x80", b"\xbf", b"\xc3", b"\xc3(", b"\xe4\xb8",
    b"\xe4\xb8x", b"\xf0\x9f\x98", b"\xf0\x9f\x98 ok", b"abc\xffdef",
    b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
    b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80", b"\x80\x80\x80",
    b"caf\xe9", b"\xe9t\xe9", b"Hello \xff world", b"\xff\xfe\xfd\xfc",
    b"\xc3\xa9\xc3", b"ok\xe2\x82", b"\xe2\x82\xac\xe2\x82", b" \xff ",
    b"\xff\n\xff", b"12\xff34", b"<|im_start|>\xff<|im_end|>",
    b"\xf4\x8f\xbf\xbf", b"\xf0\x90\x80\x80",
]


def _generated():
    """Systematic combinations: words x separators, numbers of every length."""
    out = []
    words = ["the", "The", "don't", "caf\u00e9", "\u4e2d\u6587", "42", "\U0001F600",
             "x_y", "<|im_end|>", "!?"]
    seps = [" ", "  ", "\t", "\n", " \n", "\n\n", ""]
    for w in words:
        for s in seps:
            out.append(w + s + w)
    for n in range(1, 21):
        out.append("".join(str((i * 7 + 3) % 10) for i in range(n)))
    for k in range(1, 9):
        out.append(" " * k + "x")
        out.append("x" + " " * k + "y")
    return out


CORPUS = [s.encode("utf-8") for s in _TEXT] + _BYTES + \
    [s.encode("utf-8") for s in _generated()]
