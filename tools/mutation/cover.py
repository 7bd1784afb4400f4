"""Mutant coverage of the spec: every active invariant is broken by a mutant its tests catch.

A test that names an invariant only proves something if some defect in the code behind the
rule makes it fail. Two kinds of proof count:

* **hand-written**: a mutant in ``conformance/mutants/<area>.py`` whose ``kills`` names the ID
  (``tests/meta`` runs every one and requires those IDs to be reported failed);
* **mechanical**: a site of :mod:`tools.mutation.sites` inside the reference code that
  ``@implements`` the ID, whose mutant makes a test marked with that ID fail when only those
  tests run (``--only-invariants ID``). ``python -m tools.mutation cover`` looks for one for
  each invariant without a hand-written mutant and records it in ``covered.txt``;
  ``cover --verify`` runs the recorded ones again.

Deletions are not tried: most die on a ``NameError`` at once, which says little about the test.
An invariant with neither proof is listed by ``gaps`` (and by the conformance plugin's
traceability line); ``tests/test_mutation_cover.py`` fails on any.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from tools.mutation.sites import ROOT, Site

COVERED = Path(__file__).with_name("covered.txt")
KINDS = ("cmp", "arith", "const", "negate", "boolop", "return", "minmax")
HEADER = (
    "# Invariants proved by a mechanical mutant instead of a hand-written one "
    "(python -m tools.mutation cover).\n"
    "# One line per invariant: <ID>  <site id>: the site lies in reference code that "
    "@implements the ID, and its\n"
    "# mutant makes a test marked with the ID fail when only those tests run "
    "(--only-invariants ID).\n"
)


@dataclass(frozen=True)
class Proof:
    invariant: str
    site: str


def read_covered(path: Path = COVERED) -> dict[str, str]:
    """``ID -> site id`` from lines ``<ID>  <site id>``."""
    out: dict[str, str] = {}
    if not path.exists():
        return out
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{path}:{n}: expected '<ID>  <site id>', got {line!r}")
        if parts[0] in out:
            raise ValueError(f"{path}:{n}: {parts[0]} is listed twice")
        out[parts[0]] = parts[1]
    return out


def write_covered(proofs: Mapping[str, str], path: Path = COVERED) -> None:
    body = "".join(f"{inv}  {site}\n" for inv, site in sorted(proofs.items()))
    path.write_text(HEADER + "\n" + body, encoding="utf-8")


def hand_written() -> set[str]:
    """IDs named by some hand-written mutant."""
    from conformance.mutants import all_mutants

    return {inv for m in all_mutants().values() for inv in m.kills}


def active_invariants() -> dict[str, str]:
    """``ID -> area`` of every active invariant."""
    from conformance.spec import load_spec

    return {i.id: i.area for i in load_spec().values() if i.status.startswith("active")}


def inside(site: Site, link: str) -> bool:
    """Whether ``site`` lies in the object an ``@implements`` link names (``module:qualname``;
    a class covers its methods, a function its nested functions)."""
    module, _, qual = link.partition(":")
    return site.module == module and (site.function == qual or site.function.startswith(qual + "."))


def candidates(invariant: str, links: Sequence[str], sites: Iterable[Site]) -> list[Site]:
    """Sites inside the code implementing ``invariant``, in a stable pseudo-random order."""
    found = [s for s in sites if s.kind in KINDS and any(inside(s, ln) for ln in links)]

    def rank(s: Site) -> str:
        return hashlib.sha1(f"{invariant}|{s.id}".encode()).hexdigest()

    return sorted(found, key=rank)


def test_files(invariant: str, root: Path = ROOT) -> list[str]:
    """Where the tests marked with the ID live: the test files that name it, or, when only a
    helper module names it (scenario tables), that module's folder."""
    pat = re.compile(rf"[\"']{re.escape(invariant)}[\"']")
    files, folders = [], set()
    for path in sorted((root / "conformance").rglob("*.py")):
        if pat.search(path.read_text(encoding="utf-8")):
            if path.name.startswith("test_"):
                files.append(path.relative_to(root).as_posix())
            else:
                folders.add(path.parent.relative_to(root).as_posix())
    return files or sorted(folders)


def problems(
    active: Mapping[str, str],
    hand: set[str],
    covered: Mapping[str, str],
    links: Mapping[str, Sequence[str]],
    sites: Sequence[Site],
) -> list[str]:
    """What is wrong with the coverage claims, statically: uncovered invariants, and covered.txt
    lines naming an inactive ID, an unknown site or a site outside the ID's code."""
    by_id = {s.id: s for s in sites}
    out = []
    for inv in sorted(set(active) - hand - set(covered)):
        out.append(f"{inv}: no hand-written mutant names it and covered.txt has no proof")
    for inv, site_id in sorted(covered.items()):
        if inv not in active:
            out.append(f"covered.txt: {inv} is not an active invariant")
            continue
        site = by_id.get(site_id)
        if site is None:
            out.append(f"covered.txt: {inv}: site {site_id} no longer exists (run cover again)")
        elif not any(inside(site, ln) for ln in links.get(inv, ())):
            out.append(f"covered.txt: {inv}: site {site_id} is not in code implementing {inv}")
    return out


def gaps() -> list[str]:
    """Active invariants with neither a hand-written mutant nor a recorded mechanical proof."""
    return sorted(set(active_invariants()) - hand_written() - set(read_covered()))


def _try(invariant: str, sites: Sequence[Site], timeout: float) -> tuple[str, Site | None, str]:
    from tools.mutation.run import run_one

    files = test_files(invariant)
    if not files:
        return invariant, None, "no test file names it"
    notes = []
    for site in sites:
        # the default peer (llama.cpp where installed): differential tests are tests of the ID too
        res = run_one(
            site, timeout, tests=files, extra=("--only-invariants", invariant), peer="auto"
        )
        if res.outcome == "killed" and res.detail.startswith(("FAILED ", "ERROR ")):
            return invariant, site, res.detail
        notes.append(f"{site.id} {res.outcome}")
    return invariant, None, "; ".join(notes) or "no mechanical site in its code"


def cover(
    jobs: int,
    timeout: float,
    tries: int,
    areas: Sequence[str] | None,
    only: Sequence[str] | None = None,
    verify: bool = False,
) -> int:
    """Find (or with ``verify`` re-check) mechanical proofs; returns the number still missing."""
    from conformance.spec import load_implementations
    from tools.mutation.sites import all_sites

    active = active_invariants()
    covered = read_covered()
    sites = all_sites()
    links = load_implementations()
    if verify:
        todo = {inv: [s for s in sites if s.id == sid][:1] for inv, sid in covered.items()}
    else:
        hand = hand_written()
        todo = {
            inv: candidates(inv, links.get(inv, []), sites)[:tries]
            for inv, area in sorted(active.items())
            if inv not in hand
            and inv not in covered
            and (not areas or area in areas)
            and (not only or inv in only)
        }
    print(
        f"mutant coverage: {len(todo)} invariants to {'verify' if verify else 'prove'}", flush=True
    )
    missing: dict[str, str] = {}
    found: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_try, inv, ss, timeout) for inv, ss in todo.items()]
        for n, fut in enumerate(as_completed(futures), 1):
            inv, site, detail = fut.result()
            if site is None:
                missing[inv] = detail
                print(f"[{n}/{len(todo)}] {inv}: no proof ({detail[:160]})", flush=True)
            else:
                found[inv] = site.id
                print(f"[{n}/{len(todo)}] {inv}: {site.id}", flush=True)
    if verify:
        for inv in missing:
            print(f"stale proof: {inv} {covered[inv]} (remove the line and run cover again)")
    else:
        write_covered({**covered, **found})
        print(
            f"recorded {len(found)} proofs in {COVERED.relative_to(ROOT)}; {len(missing)} without"
        )
    return len(missing)
