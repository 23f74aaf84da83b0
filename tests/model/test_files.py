"""Every reader of input files reports undecodable bytes and duplicate JSON keys with the file
and line, in its own error type."""

import json
import re

import pytest

from heteroreason.model.files import InputError, loads_json, read_text
from heteroreason.model.timing.fpga.calibration import CalibrationError, load_calibration
from heteroreason.model.timing.profile_fit import REQUIRED, ProfileError, read_profile
from heteroreason.model.workload.trace_import import import_artifact_file
from heteroreason.model.workload.traces import TraceError, load_traces

GOOD = ('{"dataset": "toy", "problem_id": "0", "prompt_tokens": 10, '
        '"steps": [{"outcome": "accept", "draft_tokens": 5}]}')


def test_read_text_names_the_line_and_column_of_a_bad_byte(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"first\nsec\xffond\n")
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}:2: is not UTF-8 text "
                                         r"\(byte 0xff at column 4\)$"):
        read_text(path)
    with pytest.raises(InputError, match=rf"^{re.escape(str(tmp_path))}/nope: cannot be read: "
                                         r"No such file or directory$"):
        read_text(tmp_path / "nope")


def test_duplicate_json_keys_are_an_error():
    assert loads_json('{"a": 1, "b": {"a": 2}}', "x") == {"a": 1, "b": {"a": 2}}
    with pytest.raises(InputError, match=r"^x: is not valid JSON: duplicate key 'a'$"):
        loads_json('{"a": 1, "a": 2}', "x")


@pytest.mark.parametrize("content, where, reason", [
    (GOOD.encode() + b"\n" + b"\xc3(" + GOOD.encode()[2:] + b"\n", ":2",
     "is not UTF-8 text (byte 0xc3 at column 1)"),
    ((GOOD[:-1] + ', "dataset": "again"}\n').encode(), ":1",
     "is not valid JSON: duplicate key 'dataset'"),
])
def test_trace_files(tmp_path, content, where, reason):
    path = tmp_path / "t.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=rf"^{re.escape(str(path) + where)}: "
                                         rf"{re.escape(reason)}$"):
        load_traces(path)


def test_artifact_and_calibration_and_profile_files(tmp_path):
    bad = tmp_path / "example_0.json"
    bad.write_bytes(b'{"idx": 0, "idx": 1}')
    with pytest.raises(TraceError, match=rf"^{re.escape(str(bad))}: is not valid JSON: "
                                         r"duplicate key 'idx'$"):
        import_artifact_file(bad)
    cal = tmp_path / "c.json"
    cal.write_bytes(b'{"format": "x"}\n\xfe')
    with pytest.raises(CalibrationError, match=rf"^{re.escape(str(cal))}:2: is not UTF-8 text "
                                               r"\(byte 0xfe at column 1\)$"):
        load_calibration(cal)
    cal.write_text(json.dumps([1, 2]))
    with pytest.raises(CalibrationError, match=rf"^{re.escape(str(cal))}: must hold a JSON "
                                               r"object, not list$"):
        load_calibration(cal)
    csv = tmp_path / "p.csv"
    csv.write_bytes((",".join(REQUIRED) + "\n").encode() + b"1,2,\x80\n")
    with pytest.raises(ProfileError, match=rf"^{re.escape(str(csv))}:2: is not UTF-8 text "
                                           r"\(byte 0x80 at column 5\)$"):
        read_profile(csv)


def test_output_problem(tmp_path):
    from heteroreason.model.files import output_problem

    file = tmp_path / "f.txt"
    file.write_text("x")
    assert output_problem(tmp_path / "new" / "deeper", folder=True) is None
    assert output_problem(tmp_path / "new" / "out.csv", folder=False) is None
    assert output_problem(file, folder=True) == f"{file} exists and is not a folder"
    assert output_problem(tmp_path, folder=False) == f"{tmp_path} is a folder, not a file"
    assert output_problem(file / "below.csv", folder=False) == f"{file} is not a folder"
