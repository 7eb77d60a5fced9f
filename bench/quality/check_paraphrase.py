#!/usr/bin/env python3
"""Check a hand-made paraphrase retrieval set (default: bench/quality/paraphrase.jsonl).

Verifies that every line is a JSON object with the expected fields, that ids
are unique, that every `kind` is a memory kind of the contract
(crates/zm-contracts/src/enums.rs) and the held-out set has every one, that
there are enough items (at least
MIN_ITEMS in the held-out set paraphrase.jsonl, at least MIN_ITEMS_OTHER
positive items in any other file, such as the development set
paraphrase-dev.jsonl), and that no query shares a content word with its
memory: after lowercasing, splitting on non-alphanumerics and dropping stop
words, two words clash when they are equal, when their crude stems are equal,
when one (of 4+ characters) is a prefix of the other, or when both have 6+
characters and share their first 5 characters.

A line may also be a negative item, a query that no memory answers:
{"id": ..., "kind": null, "memory": null, "query": "<non-empty>",
"category": "negative"}. Negatives are not counted as items and are skipped
by the shared-word check.

A file whose name contains "keyword" (the keyword development set,
keyword-dev.jsonl) is checked the other way round: its queries are meant to
reuse words of their memories, so instead of the no-shared-word rule each
positive query must share at least one content word with its memory (same
clash test), and at least MIN_ITEMS_KEYWORD positive items are required.
Such a file may also hold distractor items, memories no query asks for:
{"id": ..., "kind": "<contract kind>", "memory": "<non-empty>",
"query": null, "category": "distractor"}. Distractors are not counted as
items. Other files are checked exactly as described above.

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

MIN_ITEMS = 200  # for the held-out set, DEFAULT_FILE
MIN_ITEMS_OTHER = 50  # positive items, for any other file (e.g. the dev set)
MIN_ITEMS_KEYWORD = 80  # positive items, for a keyword set (name contains "keyword")
NEGATIVE = "negative"
DISTRACTOR = "distractor"
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
    # Keyword set: queries must share a word with their memory, not avoid it.
    keyword = "keyword" in path.name
    kinds = contract_kinds()
    problems: list[str] = []
    clashes: list[str] = []
    ids: Counter[str] = Counter()
    per_kind: Counter[str] = Counter()
    items = 0
    negatives = 0
    distractors = 0

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
        if obj.get("category") == NEGATIVE:
            bad = []
            if not isinstance(obj.get("id"), str) or not obj["id"].strip():
                bad.append("id must be a non-empty string")
            if "kind" not in obj or obj["kind"] is not None:
                bad.append("kind must be null")
            if "memory" not in obj or obj["memory"] is not None:
                bad.append("memory must be null")
            if not isinstance(obj.get("query"), str) or not obj["query"].strip():
                bad.append("query must be a non-empty string")
            if bad:
                problems.append(f"line {lineno}: negative item: {'; '.join(bad)}")
                continue
            negatives += 1
            ids[obj["id"]] += 1
            continue
        if keyword and obj.get("category") == DISTRACTOR:
            bad = []
            if not isinstance(obj.get("id"), str) or not obj["id"].strip():
                bad.append("id must be a non-empty string")
            if obj.get("kind") not in kinds:
                bad.append(f"kind must be a contract kind, not {obj.get('kind')!r}")
            if not isinstance(obj.get("memory"), str) or not obj["memory"].strip():
                bad.append("memory must be a non-empty string")
            if "query" not in obj or obj["query"] is not None:
                bad.append("query must be null")
            if bad:
                problems.append(f"line {lineno}: distractor item: {'; '.join(bad)}")
                continue
            distractors += 1
            ids[obj["id"]] += 1
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
        if keyword:
            if qry_words and not shared:
                clashes.append(
                    f"{obj['id']}: shares no content word with its memory\n"
                    f"    memory: {obj['memory']}\n"
                    f"    query:  {obj['query']}"
                )
        elif shared:
            clashes.append(
                f"{obj['id']}: shares {', '.join(shared)}\n"
                f"    memory: {obj['memory']}\n"
                f"    query:  {obj['query']}"
            )

    for i, n in ids.items():
        if n > 1:
            problems.append(f"duplicate id {i!r} ({n} times)")
    if keyword:
        if items < MIN_ITEMS_KEYWORD:
            problems.append(f"only {items} positive items, at least {MIN_ITEMS_KEYWORD} required")
    elif path.resolve() == DEFAULT_FILE:
        if items < MIN_ITEMS:
            problems.append(f"only {items} items, at least {MIN_ITEMS} required")
        # The held-out set covers the memory kinds agents write: every one.
        missing = sorted(kinds - set(per_kind))
        if missing:
            problems.append(f"no item of kind {', '.join(missing)}: every memory kind is covered")
    elif items < MIN_ITEMS_OTHER:
        problems.append(f"only {items} positive items, at least {MIN_ITEMS_OTHER} required")

    for c in clashes:
        print(c)
    for p in problems:
        print(p)
    print(f"{items} items; per kind: "
          + ", ".join(f"{k}={per_kind[k]}" for k in sorted(per_kind)))
    if negatives:
        print(f"{negatives} negative items (no shared-word check)")
    if distractors:
        print(f"{distractors} distractor items (memories without a query)")
    if keyword:
        if clashes or problems:
            print(f"FAIL: {len(clashes)} query/memory pair(s) without a shared word, "
                  f"{len(problems)} other problem(s)")
            return 1
        print("OK: every query shares a content word with its memory")
        return 0
    if clashes or problems:
        print(f"FAIL: {len(clashes)} query/memory word clash(es), {len(problems)} other problem(s)")
        return 1
    print("OK: no query shares a content word with its memory")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
