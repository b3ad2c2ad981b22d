"""A rank's own evidence folder (``hang/rank3/``) has one rule, read by both its readers: the
hang loader (``aorta hang analyze`` of a trial folder) and the run directory (the stacks of a
version-1 record). ``hang`` is below ``store``, so the rule lives there
(:func:`aorta.hang.model.is_evidence_rank_dir`) and ``rundir`` exports it; before, the loader
had its own ``rank\\d+``, which took ``rank٣`` (``\\d`` is any Unicode digit) where the run
directory refused it."""

from __future__ import annotations

import shutil

from aorta.hang.load import load_evidence
from aorta.hang.model import CulpritFrame, HangReport
from aorta.hang.model import is_evidence_rank_dir as hangs_rule
from aorta.store import rundir
from aorta.store.rundir import HANG_DIR, RunDir, evidence_name, evidence_rank_dir
from tests.conftest import DATA

STACKS = DATA / "hang" / "node" / HANG_DIR / "rank1" / "stacks_1.json"

#: Folder names inside ``hang/``, each given a stacks file of its own rank (20, 21, …): the
#: file is read through the folder only if the folder is a rank's.
NAMES = [
    evidence_rank_dir(0),
    "rank12",
    "rank007",
    "rank",
    "Rank3",
    "rank3.bak",
    "rank-3",
    "rank 3",
    "xrank3",
    "rank3x",
    "rank٣",  # an Arabic-Indic three: a digit to \d, not to the rule
    "rank²",  # a digit to str.isdigit, not ASCII
]
ACCEPTED = {evidence_rank_dir(0), "rank12", "rank007"}


def test_the_rule_has_one_home_that_the_run_directory_exports():
    assert rundir.is_evidence_rank_dir is hangs_rule
    assert {n for n in NAMES if hangs_rule(n)} == ACCEPTED


def _found_by_each_reader(trial_dir, ranks):
    """The ranks whose stacks the hang loader reads from ``trial_dir``, and those whose
    stacks the run directory finds for a version-1 record's culprit frames."""
    loaded = {e.rank for e in load_evidence([trial_dir]) if e.stacks is not None}
    run = trial_dir.parents[2]
    frames = tuple(CulpritFrame(rank, "train.py:41 in step", "stacks") for rank in ranks)
    old = HangReport(summary="s", kind="missing", frames=frames)
    report = RunDir(run).forensics_of_version(1, "c", 0, old)
    return loaded, {f.rank for f in report.frames if f.stack_file}


def test_the_hang_loader_and_the_run_directory_take_the_same_folders(tmp_path):
    trial = tmp_path / "run" / "cells" / "c" / "trial_0000"
    hang = trial / HANG_DIR
    ranks = {}
    for k, name in enumerate(NAMES):
        rank = 20 + k
        (hang / name).mkdir(parents=True)
        shutil.copyfile(STACKS, hang / name / evidence_name("stacks", rank))
        ranks[rank] = name
    loaded, found = _found_by_each_reader(trial, ranks)
    assert {ranks[r] for r in loaded} == ACCEPTED
    assert found == loaded


def test_a_link_or_a_file_named_as_a_rank_s_folder_is_no_folder_to_either(tmp_path):
    trial = tmp_path / "run" / "cells" / "c" / "trial_0000"
    hang = trial / HANG_DIR
    hang.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copyfile(STACKS, elsewhere / evidence_name("stacks", 5))
    (hang / evidence_rank_dir(5)).symlink_to(elsewhere, target_is_directory=True)
    (hang / evidence_rank_dir(6)).write_bytes(b"\x00\x01 not a folder")
    # One real rank folder, so that the loader has evidence to read at all.
    (hang / evidence_rank_dir(7)).mkdir()
    shutil.copyfile(STACKS, hang / evidence_rank_dir(7) / evidence_name("stacks", 7))
    assert hangs_rule(evidence_rank_dir(5)) and hangs_rule(evidence_rank_dir(6))
    loaded, found = _found_by_each_reader(trial, [5, 6, 7])
    assert loaded == found == {7}
