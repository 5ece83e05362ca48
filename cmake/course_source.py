"""The one reader of C++ sources for the course's checks (cmake/check_sources.py). Standard library only.

Source(text) scans the text once, character by character, for what a regex over the whole file gets wrong: //
and /* */ comments, "strings", 'c'haracters (not the digit separators of 1'000'000) and raw strings R"d(...)d".
From that it gives the comments with their lines, and the code with comments and the insides of literals blanked
to spaces, so that brackets and words in them are not code and every position keeps its line.
"""
import bisect
import re

_NEXT = re.compile(r'//|/\*|["\']')
_RAW_PREFIXES = ("R", "u8R", "uR", "UR", "LR")


class Source:
    def __init__(self, text):
        self.text, self.spans = text, []  # spans: (kind, start, end), kind one of // /* " ' R
        self._newlines = [m.start() for m in re.finditer("\n", text)]
        i, n = 0, len(text)
        while (m := _NEXT.search(text, i)):
            i, token = m.start(), m.group()
            if token == "//":
                end, kind = (text.find("\n", i) + 1 or n + 1) - 1, "//"
            elif token == "/*":
                end, kind = (text.find("*/", i + 2) + 1 or n - 1) + 1, "/*"
            else:
                word = re.search(r"[\w']*$", text[max(0, i - 40):i]).group()
                if token == "'" and word[:1].isdigit():  # 1'000: a digit separator
                    i += 1
                    continue
                if token == '"' and word in _RAW_PREFIXES:
                    paren = text.find("(", i)
                    close = ")" + text[i + 1:paren] + '"'
                    end, kind = text.find(close, paren) + len(close), "R"
                else:
                    k = i + 1
                    while k < n and text[k] not in token + "\n":
                        k += 2 if text[k] == "\\" else 1
                    end, kind = k + 1, token
            self.spans.append((kind, i, min(end, n)))
            i = end

    def line(self, pos):
        """The 1-based line of a position."""
        return bisect.bisect_left(self._newlines, pos) + 1

    def comments(self):
        """[(start, line, text)] of every comment."""
        return [(a, self.line(a), self.text[a:b]) for kind, a, b in self.spans if kind in ("//", "/*")]

    def literals(self):
        """[(start, end, kind)] of every string and character literal, quotes included."""
        return [(a, b, kind) for kind, a, b in self.spans if kind not in ("//", "/*")]

    def code(self, strings=True):
        """The text with comments blanked, and the insides of literals too unless strings=False."""
        out, last = [], 0
        for kind, a, b in self.spans:
            if kind in ("//", "/*"):
                out += [self.text[last:a], _blank(self.text[a:b])]
            elif strings:
                out += [self.text[last:a + 1], _blank(self.text[a + 1:b - 1]), self.text[b - 1:b]]
            else:
                out.append(self.text[last:b])
            last = b
        out.append(self.text[last:])
        return "".join(out)


def _blank(s):
    return re.sub(r"[^\n]", " ", s)


def matching(code, i):
    """The index just past the bracket that closes the one at code[i] (code with literals blanked)."""
    pairs, stack = {"(": ")", "[": "]", "{": "}"}, []
    for k in range(i, len(code)):
        if code[k] in pairs:
            stack.append(pairs[code[k]])
        elif stack and code[k] == stack[-1]:
            stack.pop()
            if not stack:
                return k + 1
    return len(code)


_CLASS = re.compile(r"\b(class|struct|union)\s+(?:alignas\s*\([^)]*\)\s*)?(\w+)(?:\s+final)?\s*(?::[^{]*)?$")
_BODY = re.compile(r"\)\s*(?:const\s*)?(?:noexcept\s*(?:\([^)]*\))?\s*)?(?:override\s*|final\s*)*(?:->[\w:<>,\s*&]*)?$")


def declarations(code):
    """(scopes, statement, start, end) of each statement at namespace or class scope, found by matching braces.
    A statement ends at ';' (end ";") or is a function's head (end "{", its body skipped). scopes: a list of
    ("ns", name) and ("class", name, public?) from the outside in; a class's access labels are followed."""
    code = re.sub(r"^[ \t]*#.*(?:\\\n.*)*", lambda m: _blank(m.group()), code, flags=re.M)  # the preprocessor's
    stack, found, start, i = [], [], 0, 0
    while i < len(code):
        c = code[i]
        head = code[start:i]
        if c == ";":
            found.append((list(stack), head, start, ";"))
            start = i + 1
        elif c == ":" and stack and stack[-1][0] == "class" and head.strip() in ("public", "private", "protected") \
                and code[i + 1] != ":":
            stack[-1] = ("class", stack[-1][1], head.strip() == "public")
            start = i + 1
        elif c == "}":
            if stack:
                stack.pop()
            start = i + 1
        elif c == "{":
            ns = re.search(r"\bnamespace\s*([\w:]*)\s*$|\bextern\s*\"\s*\"\s*$", head)
            cls = _CLASS.search(head)
            if ns:
                stack.append(("ns", ns.group(1) or ""))
                start = i + 1
            elif cls and not re.search(r"\benum\b|=", head):
                stack.append(("class", cls.group(2), cls.group(1) != "class"))
                start = i + 1
            elif _BODY.search(head) or re.search(r"\)\s*:[^:]", head) and not re.search(r"=", head.split("(")[0]):
                # A function's body, after its head or its constructor's initialisers (`a_(x), b_{y} {`: a
                # member's brace follows a name, the body's a ')' or a '}').
                while re.search(r"[\w>]\s*$", code[start:i]) and re.search(r"\)\s*:", code[start:i]):
                    i = code.find("{", matching(code, i))
                found.append((list(stack), code[start:i], start, "{"))
                i = start = matching(code, i)
                continue
            else:  # an enum's or an initialiser's braces: part of the statement
                i = matching(code, i)
                continue
        i += 1
    return found


_KEYWORDS = {"return", "if", "for", "while", "switch", "sizeof", "decltype", "static_assert", "alignof", "noexcept",
             "alignas", "requires", "throw", "typename", "template", "using", "typedef", "__launch_bounds__"}


def function(statement):
    """(name, parameters, qualifier) of the function a declaration statement declares, or None: a variable, a
    type, a macro call, a deleted or defaulted member. qualifier: "Class::" of a member defined outside it."""
    s = re.sub(r"^\s*template\s*<", "<", statement)
    if s.startswith("<"):
        depth = 0
        for k, c in enumerate(s):
            depth += {"<": 1, ">": -1}.get(c, 0)
            if depth == 0:
                break
        s = s[k + 1:]
    s = s.strip()
    if not s or re.match(r"(using|typedef|friend|static_assert|namespace|enum|class|struct|union)\b", s):
        return None
    op = re.search(r"\b((?:\w+::)*)operator\s*(\(\)|\[\]|[^\s(\w]+|\w[\w\s:*&<>]*?)\s*\(", s)
    if op:
        name, paren, qualifier = "operator" + op.group(2).replace(" ", ""), op.end() - 1, op.group(1)
    else:
        depth, k = 0, 0
        while k < len(s):
            c = s[k]
            depth = depth + 1 if c == "<" else max(depth - 1, 0) if c == ">" else depth
            if c == "=" and depth == 0:
                return None  # a variable with an initialiser
            if c == "(" and depth == 0:
                m = re.search(r"((?:\w+::)*)(~?[A-Za-z_]\w*)\s*$", s[:k])
                if m and m.group(2) in _KEYWORDS:
                    k = matching(s, k)  # an attribute: __launch_bounds__(256), alignas(64)
                    continue
                if not m or m.group(2).startswith("~") or re.match(r"\(\s*\*", s[k:]) or \
                        re.match(r"[A-Z][A-Z0-9_]+$", m.group(2)):
                    return None  # a destructor, a function pointer, a macro call
                name, paren, qualifier = m.group(2), k, m.group(1)
                break
            k += 1
        else:
            return None
    close = matching(s, paren)
    if re.match(r"\s*(?:const\s*)?(?:noexcept\s*)?=\s*(?:delete|default)\b", s[close:]):
        return None
    return name, s[paren + 1:close - 1].strip(), qualifier
