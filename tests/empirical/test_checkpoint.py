"""Checkpoint integrity (empirical.checkpoint): checksums, damaged files named in errors, the previous good
checkpoint kept as a fallback, stale temporary files removed (issue 18, defects 1 and 5)."""

from __future__ import annotations

import pathlib

import pytest

torch = pytest.importorskip("torch")

from empirical.checkpoint import (  # noqa: E402
    CHECKSUM_KEY,
    CheckpointError,
    load_checkpoint,
    previous_path,
    save_checkpoint,
    state_digest,
)

# A recognisable, non-repeating float64 pattern: its raw bytes occur once in the file, so a test can find the
# tensor's record inside torch's zip archive and flip one byte of it.
PATTERN = torch.arange(1, 65, dtype=torch.float64) * 1.000000123456789


def _state(step=7):
    return {
        "format": "test/1",
        "step": step,
        "params": {"w": PATTERN.clone() + step},
        "optimizer": {"state": {0: {"exp_avg": torch.zeros(3)}}, "param_groups": [{"lr": 0.1, "params": [0]}]},
        "gen": torch.ByteTensor([1, 2, 3]),
        "note": None,
    }


def _flip_byte_in_tensor(path: pathlib.Path, tensor: torch.Tensor) -> None:
    raw = bytearray(path.read_bytes())
    needle = tensor.numpy().tobytes()
    at = raw.find(needle)
    assert at >= 0 and raw.find(needle, at + 1) < 0, "the tensor's bytes must occur exactly once in the archive"
    raw[at + 3 * 8 + 2] ^= 0x10  # one byte in the middle of element 3
    path.write_bytes(bytes(raw))


def test_round_trip_verifies_and_strips_the_checksum(tmp_path):
    path = tmp_path / "ck.pt"
    state = _state()
    save_checkpoint(path, state)
    got = load_checkpoint(path)
    assert CHECKSUM_KEY not in got
    assert got["step"] == 7 and torch.equal(got["params"]["w"], state["params"]["w"])
    # the stored digest is the digest of the contents (recomputed here from the state we saved)
    assert torch.load(path, weights_only=True)[CHECKSUM_KEY] == state_digest(state)


def test_digest_changes_with_any_stored_value():
    base = state_digest(_state())
    changed = _state()
    changed["params"]["w"][5] += 1e-15 * changed["params"]["w"][5]  # one ulp-scale change
    assert state_digest(changed) != base
    other = _state()
    other["optimizer"]["param_groups"][0]["lr"] = 0.1000001
    assert state_digest(other) != base
    assert state_digest(_state()) == base  # deterministic


def test_a_flipped_byte_inside_a_tensor_record_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "ck.pt"
    state = _state()
    save_checkpoint(path, state)
    _flip_byte_in_tensor(path, state["params"]["w"])
    # torch itself reads the damaged file without complaint: the checksum is what catches it
    assert not torch.equal(torch.load(path, weights_only=True)["params"]["w"], state["params"]["w"])
    with pytest.raises(CheckpointError, match=r"ck\.pt is damaged.*checksum.*delete it"):
        load_checkpoint(path)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "directory", "no_checksum"])
def test_unreadable_checkpoints_give_errors_that_name_the_file(tmp_path, damage):
    path = tmp_path / "run.pt"
    save_checkpoint(path, _state())
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00not a checkpoint" * 50)
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "directory":
        path.unlink()
        path.mkdir()
    else:
        torch.save({"step": 1}, path)
    with pytest.raises(CheckpointError, match="run.pt") as info:
        load_checkpoint(path)
    assert info.value.path == path


def test_the_previous_checkpoint_is_kept_and_used_as_fallback(tmp_path):
    path = tmp_path / "ck.pt"
    save_checkpoint(path, _state(step=5))
    save_checkpoint(path, _state(step=10))
    assert previous_path(path) == tmp_path / "ck.prev.pt"
    assert load_checkpoint(previous_path(path))["step"] == 5 and load_checkpoint(path)["step"] == 10
    _flip_byte_in_tensor(path, _state(step=10)["params"]["w"])
    with pytest.raises(CheckpointError, match=r"ck\.prev\.pt"):  # the message says where the good one is
        load_checkpoint(path)
    assert load_checkpoint(path, fallback=True)["step"] == 5


def test_a_write_killed_between_keeping_the_old_and_placing_the_new_resumes_from_the_old(tmp_path):
    path = tmp_path / "ck.pt"
    save_checkpoint(path, _state(step=5))
    save_checkpoint(path, _state(step=10))
    path.unlink()  # what a kill between the two renames leaves
    assert load_checkpoint(path)["step"] == 5
    with pytest.raises(FileNotFoundError, match="absent.pt"):
        load_checkpoint(tmp_path / "absent.pt", fallback=True)


def test_stale_temporaries_of_killed_writes_are_removed_at_the_next_write(tmp_path):
    path = tmp_path / "ck.pt"
    stale = [tmp_path / ".ck.pt.abc123.tmp", tmp_path / ".ck.pt.zz9.tmp"]
    for f in stale:
        f.write_bytes(b"partial")
    unrelated = tmp_path / ".other.pt.x.tmp"
    unrelated.write_bytes(b"another file's write in progress")
    save_checkpoint(path, _state())
    assert not any(f.exists() for f in stale) and unrelated.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.pt.x.tmp", "ck.pt"]


def test_a_state_that_weights_only_loading_cannot_hold_is_refused_before_writing(tmp_path):
    with pytest.raises(TypeError, match="object"):
        save_checkpoint(tmp_path / "ck.pt", {"step": 1, "thing": object()})
    assert not (tmp_path / "ck.pt").exists()
