#!/usr/bin/env python3
"""doze_kafka.py's shape, measured: does the file still read as a book?

    python3 conformance/book.py                 # everything below
    python3 conformance/book.py classes|handlers|chapters|writes

classes   every class: its line count and the first line of its docstring (its job)
handlers  every handle_*: its code lines (docstring, comments and blank lines
          excluded; the schema is the decorator's, so not counted), longest first
chapters  every numbered chapter (a banner "# N. TITLE" between two ### lines):
          its first line and its size
forward   every name used in one chapter and defined at the top level of a
          later one (the book reads top to bottom: these should be none; a
          lettered appendix, Kafka's generated tables, is read last on purpose)
writes    every assignment to an attribute of something other than self
          (x.attr = ..., x.attr += ...) whose attribute belongs to one of the
          file's classes that are not records: one class writing another's state

test_doze_kafka.py checks the limits with the same functions.
"""
import ast
import io
import re
import sys
import tokenize

from lib import DOZE

# Classes that are records: plain data their owner reads and writes (a Kafka
# message, a group member, a producer's entry...). Writing their fields from
# the class that owns them is what they are for.
RECORDS = {"Msg", "GroupMember", "Group", "ProducerEntry", "TransactionMetadata", "Park", "Slot", "Request", "Fault",
           "Listener", "Api", "Field", "Writer", "Reader", "ConsoleSession", "BatchError"}
# Local names the handlers and the log give to a Msg they are building (an
# answer's part, a topic's row): Msg has no class of its own to tell by.
MSG_NAMES = {"part", "res", "out", "msg", "t", "p", "topic", "response", "answer", "missing", "result"}


def source(path=DOZE):
    with open(path, encoding="utf-8") as f:
        return f.read()


def code_lines(node, text):
    """Lines of a function's body holding code: no docstring, comment or blank line."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if not body:
        return 0
    first, last = body[0].lineno, node.end_lineno
    lines = set()
    snippet = "\n".join(text.splitlines()[first - 1:last])
    for tok in tokenize.generate_tokens(io.StringIO(snippet).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                            tokenize.ENDMARKER):
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines)


def classes(text=None):
    """[(name, first line, line count, job)] in file order."""
    text = text or source()
    out = []
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef):
            doc = (ast.get_docstring(node) or "").strip().split("\n\n")[0].replace("\n", " ")
            out.append((node.name, node.lineno, node.end_lineno - node.lineno + 1, doc))
    return out


def handlers(text=None):
    """[(name, code lines)] of every handle_* function, longest first."""
    text = text or source()
    out = [(n.name, code_lines(n, text)) for n in ast.parse(text).body
           if isinstance(n, ast.FunctionDef) and n.name.startswith("handle_")]
    return sorted(out, key=lambda x: -x[1])


BANNER = re.compile(r"^#{20,}\n# (\d+|[A-Z])\. (.+)\n#{20,}$", re.M)


def chapters(text=None):
    """[(number, title, first line, line count)]: each numbered chapter up to the next."""
    text = text or source()
    marks = [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in BANNER.finditer(text)]
    total = text.count("\n") + 1
    return [(n, title, line, (marks[i + 1][2] if i + 1 < len(marks) else total) - line)
            for i, (n, title, line) in enumerate(marks)]


def writes(text=None):
    """[(line, 'writer: target.attr')] for attribute writes across classes (see above)."""
    text = text or source()
    tree = ast.parse(text)
    owned = {}                       # attribute -> {classes that set it on self}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            for target in assigned(node):
                if isinstance(target.value, ast.Name) and target.value.id in ("self", "cls"):
                    owned.setdefault(target.attr, set()).add(cls.name)
        for node in cls.body:        # class attributes and __slots__ count too
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                    and node.targets[0].id == "__slots__" and isinstance(node.value, ast.Tuple):
                for elt in node.value.elts:
                    owned.setdefault(elt.value, set()).add(cls.name)
    found = []
    for top in tree.body:
        where = top.name if isinstance(top, (ast.ClassDef, ast.FunctionDef)) else "module"
        for node in ast.walk(top):
            for target in assigned(node):
                base = target.value
                if isinstance(base, ast.Name) and base.id in {"self", "cls"} | MSG_NAMES:
                    continue
                owners = owned.get(target.attr, set())
                if owners and not owners & RECORDS and where not in owners:
                    found.append((target.lineno, f"{where}: {ast.unparse(target)} (of {', '.join(sorted(owners))})"))
    return sorted(found)


def forward(text=None):
    """[(line, name, line defined)] of top-level names used before their chapter."""
    text = text or source()
    tree = ast.parse(text)
    starts = [line for _, _, line, _ in chapters(text)]
    appendix = [line for n, _, line, _ in chapters(text) if not n.isdigit()]

    def chapter(line):
        return sum(1 for s in starts if s <= line)
    defined = {}
    for node in tree.body:
        names = []
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names += [e.id for e in ast.walk(t) if isinstance(e, ast.Name)]
        for n in names:
            if not any(node.lineno >= a for a in appendix):     # an appendix is read last, on purpose
                defined.setdefault(n, node.lineno)
    found = set()

    def visit(node, local):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            local = local | bound_in(node)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in defined \
                and node.id not in local and chapter(defined[node.id]) > chapter(node.lineno):
            found.add((node.lineno, node.id, defined[node.id]))
        for child in ast.iter_child_nodes(node):
            visit(child, local)
    visit(tree, frozenset())
    return sorted(found)


def bound_in(fn):
    """Names a function (or lambda) binds anywhere in it: its arguments and locals."""
    names = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node is not fn:
            names.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def assigned(node):
    targets = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    out = []
    for t in targets:
        out += [e for e in (t.elts if isinstance(t, ast.Tuple) else [t]) if isinstance(e, ast.Attribute)]
    return out


REPORTS = {   # what: (its heading, its rows, one row as text)
    "classes": ("classes (line, lines, name, job)", classes,
                lambda r: f"{r[1]:6} {r[2]:4}  {r[0]:24} {r[3][:100]}"),
    "handlers": ("handlers, code lines (docstring, comments, blank lines and schema excluded)", handlers,
                 lambda r: f"{r[1]:3}  {r[0]}"),
    "chapters": ("chapters (number, first line, lines, title)", chapters,
                 lambda r: f"{r[0]:>3} {r[2]:6} {r[3]:5}  {r[1]}"),
    "forward": ("names used before the chapter that defines them (line, name, defined at)", forward,
                lambda r: f"{r[0]:6}  {r[1]} (defined at {r[2]})"),
    "writes": ("attribute writes across classes", writes, lambda r: f"{r[0]:6}  {r[1]}"),
}


def main(argv):
    text = source()
    for what in argv[1:] or list(REPORTS):
        heading, rows_of, row = REPORTS[what]
        rows = rows_of(text)
        print(f"{len(rows)} {heading}")
        for r in rows:
            print("  " + row(r))


if __name__ == "__main__":
    main(sys.argv)
