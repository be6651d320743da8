"""gbnf_match.py - a small, slow, independent GBNF recogniser (llama.cpp's
dialect) used to check the grammars json_schema.c and regex_gbnf.c write:
does the grammar accept this whole string?

It works on code points, like llama.cpp's grammar engine: a parser of the
grammar text into a tree, then a matcher that returns the set of end
positions an element can reach from a start position (memoised per rule and
position).  Left recursion is not supported (llama.cpp refuses it too).
"""
import functools
import sys

sys.setrecursionlimit(20000)


class GrammarError(Exception):
    pass


def _is_word(c):
    return c.isascii() and (c.isalnum() or c == '-')


class _Parser:
    def __init__(self, text):
        self.s = text
        self.i = 0
        self.rules = {}

    def ws(self, newline_ok):
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == '#':
                while self.i < len(s) and s[self.i] not in '\r\n':
                    self.i += 1
            elif c in ' \t' or (newline_ok and c in '\r\n'):
                self.i += 1
            else:
                break

    def name(self):
        j = self.i
        while self.i < len(self.s) and _is_word(self.s[self.i]):
            self.i += 1
        if j == self.i:
            raise GrammarError('expected a name at %d: %r' % (j, self.s[j:j + 20]))
        return self.s[j:self.i]

    def char(self):
        s = self.s
        if s[self.i] == '\\':
            c = s[self.i + 1]
            self.i += 2
            if c in 'xuU':
                n = {'x': 2, 'u': 4, 'U': 8}[c]
                v = int(s[self.i:self.i + n], 16)
                self.i += n
                return chr(v)
            m = {'n': '\n', 'r': '\r', 't': '\t', '\\': '\\', '"': '"', '[': '[', ']': ']'}
            if c not in m:
                raise GrammarError('unknown escape \\%s' % c)
            return m[c]
        c = s[self.i]
        self.i += 1
        return c

    def seq(self, nested):
        items = []
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == '"':
                self.i += 1
                lit = []
                while s[self.i] != '"':
                    lit.append(self.char())
                self.i += 1
                items.append(('lit', ''.join(lit)))
            elif c == '[':
                self.i += 1
                neg = False
                if s[self.i] == '^':
                    neg = True
                    self.i += 1
                ranges = []
                while s[self.i] != ']':
                    a = self.char()
                    b = a
                    if s[self.i] == '-' and s[self.i + 1] != ']':
                        self.i += 1
                        b = self.char()
                    ranges.append((a, b))
                self.i += 1
                items.append(('cls', neg, tuple(ranges)))
            elif c == '.':
                self.i += 1
                items.append(('any',))
            elif c == '(':
                self.i += 1
                self.ws(True)
                alt = self.alts(True)
                if s[self.i] != ')':
                    raise GrammarError('expected ) at %d' % self.i)
                self.i += 1
                items.append(alt)
            elif _is_word(c):
                j = self.i
                n = self.name()
                k = self.i
                self.ws(False)
                if self.s.startswith('::=', self.i):
                    self.i = j
                    break
                self.i = k
                items.append(('ref', n))
            elif c in '*+?':
                if not items:
                    raise GrammarError('nothing to repeat at %d' % self.i)
                self.i += 1
                lo, hi = {'*': (0, None), '+': (1, None), '?': (0, 1)}[c]
                items[-1] = ('rep', items[-1], lo, hi)
            elif c == '{':
                if not items:
                    raise GrammarError('nothing to repeat at %d' % self.i)
                j = s.index('}', self.i)
                body = s[self.i + 1:j]
                self.i = j + 1
                if ',' in body:
                    a, b = body.split(',')
                    lo, hi = int(a), (int(b) if b.strip() else None)
                else:
                    lo = hi = int(body)
                items[-1] = ('rep', items[-1], lo, hi)
            else:
                break
            self.ws(nested)
        return ('seq', tuple(items))

    def alts(self, nested):
        out = [self.seq(nested)]
        while self.i < len(self.s) and self.s[self.i] == '|':
            self.i += 1
            self.ws(True)
            out.append(self.seq(nested))
        return ('alt', tuple(out))

    def parse(self):
        self.ws(True)
        while self.i < len(self.s):
            n = self.name()
            self.ws(False)
            if not self.s.startswith('::=', self.i):
                raise GrammarError('expected ::= after %s' % n)
            self.i += 3
            self.ws(True)
            self.rules[n] = self.alts(False)
            self.ws(True)
        for r in list(self.rules.values()):
            self._check_refs(r)
        return self.rules

    def _check_refs(self, node):
        k = node[0]
        if k == 'ref':
            if node[1] not in self.rules:
                raise GrammarError('undefined rule %s' % node[1])
        elif k in ('seq', 'alt'):
            for x in node[1]:
                self._check_refs(x)
        elif k == 'rep':
            self._check_refs(node[1])


def parse(text):
    return _Parser(text).parse()


class Matcher:
    def __init__(self, text, root='root'):
        self.rules = parse(text)
        if root not in self.rules:
            raise GrammarError('no rule %s' % root)
        self.root = root

    def accepts(self, s):
        self.s = s
        self._memo = {}
        return len(s) in self.m(('ref', self.root), 0)

    def m(self, node, i):
        s = self.s
        k = node[0]
        if k == 'lit':
            return {i + len(node[1])} if s.startswith(node[1], i) else set()
        if k == 'cls':
            if i >= len(s):
                return set()
            c = s[i]
            hit = any(a <= c <= b for a, b in node[2])
            return {i + 1} if hit != node[1] else set()
        if k == 'any':
            return {i + 1} if i < len(s) else set()
        if k == 'ref':
            key = (node[1], i)
            if key in self._memo:
                r = self._memo[key]
                if r is None:
                    raise GrammarError('left recursion through %s' % node[1])
                return r
            self._memo[key] = None
            r = self.m(self.rules[node[1]], i)
            self._memo[key] = r
            return r
        if k == 'seq':
            pos = {i}
            for x in node[1]:
                nxt = set()
                for p in pos:
                    nxt |= self.m(x, p)
                pos = nxt
                if not pos:
                    break
            return pos
        if k == 'alt':
            out = set()
            for x in node[1]:
                out |= self.m(x, i)
            return out
        if k == 'rep':
            _, x, lo, hi = node
            pos = {i}
            out = set(pos) if lo == 0 else set()
            seen = set(pos)
            n = 0
            while pos and (hi is None or n < hi):
                nxt = set()
                for p in pos:
                    nxt |= self.m(x, p)
                n += 1
                if hi is None and n >= lo:
                    nxt -= seen
                    seen |= nxt
                if n >= lo:
                    out |= nxt
                pos = nxt
            return out
        raise GrammarError('bad node %r' % (node,))
