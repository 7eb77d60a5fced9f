#!/usr/bin/env python3
"""Check bench/quality/paraphrase.jsonl, the hand-made paraphrase retrieval set.

Verifies that every line is a JSON object with the expected fields, that ids
are unique, that every `kind` is a memory kind of the contract
(crates/zm-contracts/src/enums.rs), that there are at least MIN_ITEMS items,
and that no query shares a content word with its memory: after lowercasing,
splitting on non-alphanumerics and dropping stop words, two words clash when
they are equal, when their crude stems are equal, when one (of 4+ characters)
is a prefix of the other, or when both have 6+ characters and share their
first 5 characters.

Prints every offending pair and exits 1 on any problem. Stdlib only.

usage: python3 bench/quality/check_paraphrase.py [FILE]
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_FILE = HERE / "paraphrase.jsonl"
ENUMS_RS = HERE.parent.parent / "crates" / "zm-contracts" / "src" / "enums.rs"

MIN_ITEMS = 200
FIELDS = ("id", "kind", "memory", "query", "category")
# The contract's kinds, used when enums.rs cannot be read.
FALLBACK_KINDS = {
    "fact", "preference", "decision", "convention", "gotcha",
    "reference", "episode", "task", "open-question",
}

STOP_WORDS = set("""
a about above across after again against all almost along already also although
always am among an and another any anyone anything are aren around as at
be because been before being below between both but by
can cannot could couldn d did didn do does doesn doing don done down during
e each eg either else etc even ever every
few for from further
g get gets got
had has hasn have haven having he her here hers herself him himself his how however
i ie if in into is isn it its itself
just
least less let ll
m many may me might more most much must mustn my myself
neither no nor not now
of off often on once one only onto or other others our ours ourselves out over own
per
rather re
s same shall she should shouldn since so some someone something such
t than that the their theirs them themselves then there these they thing things this
those though through thus till to too
under until up upon us
ve very via
was wasn we were weren what whatever when where whether which while who whom whose
why will with within without won would wouldn
yet you your yours yourself yourselves
""".split())

# A few irregular forms mapped to one lemma, so that e.g. "chose" and "choose" clash.
IRREGULAR = {
    "chose": "choose", "chosen": "choose",
    "ran": "run", "wrote": "write", "written": "write",
    "broke": "break", "broken": "break", "took": "take", "taken": "take",
    "went": "go", "gone": "go", "made": "make", "kept": "keep",
    "left": "leave", "lost": "lose", "built": "build", "sent": "send",
    "spent": "spend", "held": "hold", "bought": "buy", "paid": "pay",
    "sold": "sell", "told": "tell", "found": "find", "knew": "know",
    "known": "know", "saw": "see", "seen": "see", "gave": "give",
    "given": "give", "began": "begin", "begun": "begin", "fell": "fall",
    "fallen": "fall", "hid": "hide", "hidden": "hide", "ate": "eat",
    "children": "child", "people": "person", "data": "datum",
}

# Suffixes stripped by the crude stemmer, longest first.
SUFFIXES = (
    "izations", "ization", "isations", "isation", "ations", "ation",
    "nesses", "ness", "ments", "ment", "ings", "ing", "ions", "ion",
    "ities", "ity", "izers", "izer", "izes", "ized", "ize", "ises", "ised", "ise",
    "ables", "able", "ibles", "ible", "fully", "ful", "less", "ively", "ive",
    "ers", "er", "edly", "ed", "ally", "ly", "als", "al", "es", "s",
)


def crude_stem(word: str) -> str:
    """A small Porter-like suffix stripper: good enough to catch inflections."""
    w = IRREGULAR.get(word, word)
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    for _ in range(2):
        for suf in SUFFIXES:
            if w.endswith(suf) and len(w) - len(suf) >= 3:
                w = w[: -len(suf)]
                break
        else:
            break
    # Undouble a final consonant (running -> runn -> run), drop a final e,
    # and treat a final y as i (policy / policies, deploy / deployed).
    if len(w) >= 4 and w[-1] == w[-2] and w[-1] not in "aeiouls":
        w = w[:-1]
    if len(w) >= 4 and w.endswith("e"):
        w = w[:-1]
    if w.endswith("y") and len(w) >= 3:
        w = w[:-1] + "i"
    return w


def content_words(text: str) -> list[str]:
    words = [t for t in re.split(r"[^a-z0-9]+", text.lower()) if t]
    return [t for t in words if t not in STOP_WORDS]


def clash(a: str, b: str) -> bool:
    if a == b:
        return True
    if crude_stem(a) == crude_stem(b):
        return True
    short, long_ = sorted((a, b), key=len)
    if len(short) >= 4 and long_.startswith(short):
        return True
    if len(a) >= 6 and len(b) >= 6 and a[:5] == b[:5]:
        return True
    return False


def contract_kinds() -> set[str]:
    try:
        src = ENUMS_RS.read_text(encoding="utf-8")
    except OSError:
        return set(FALLBACK_KINDS)
    m = re.search(r"MemoryKind\s*\{(.*?)\}", src, re.S)
    if not m:
        return set(FALLBACK_KINDS)
    kinds = set(re.findall(r'=\s*"([a-z-]+)"', m.group(1)))
    return kinds or set(FALLBACK_KINDS)


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else DEFAULT_FILE
    kinds = contract_kinds()
    problems: list[str] = []
    clashes: list[str] = []
    ids: Counter[str] = Counter()
    per_kind: Counter[str] = Counter()
    items = 0

    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            problems.append(f"line {lineno}: empty line")
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"line {lineno}: invalid JSON: {e}")
            continue
        if not isinstance(obj, dict):
            problems.append(f"line {lineno}: not a JSON object")
            continue
        missing = [f for f in FIELDS if not isinstance(obj.get(f), str) or not obj[f].strip()]
        if missing:
            problems.append(f"line {lineno}: missing or empty field(s): {', '.join(missing)}")
            continue
        items += 1
        ids[obj["id"]] += 1
        per_kind[obj["kind"]] += 1
        if obj["kind"] not in kinds:
            problems.append(f"line {lineno} ({obj['id']}): unknown kind {obj['kind']!r}")
        mem_words = content_words(obj["memory"])
        qry_words = content_words(obj["query"])
        if not qry_words:
            problems.append(f"line {lineno} ({obj['id']}): query has no content word")
        shared = sorted({f"{q}~{m}" for q in qry_words for m in mem_words if clash(q, m)})
        if shared:
            clashes.append(
                f"{obj['id']}: shares {', '.join(shared)}\n"
                f"    memory: {obj['memory']}\n"
                f"    query:  {obj['query']}"
            )

    for i, n in ids.items():
        if n > 1:
            problems.append(f"duplicate id {i!r} ({n} times)")
    if items < MIN_ITEMS:
        problems.append(f"only {items} items, at least {MIN_ITEMS} required")

    for c in clashes:
        print(c)
    for p in problems:
        print(p)
    print(f"{items} items; per kind: "
          + ", ".join(f"{k}={per_kind[k]}" for k in sorted(per_kind)))
    if clashes or problems:
        print(f"FAIL: {len(clashes)} query/memory word clash(es), {len(problems)} other problem(s)")
        return 1
    print("OK: no query shares a content word with its memory")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
