import pytest

from heteroreason.model.experiments.report import format_table


def test_format_table_aligns_and_checks_widths():
    assert format_table(["a", "bb"], [[1, 22], [333, 4]]).splitlines() == [
        "  a  bb", "  1  22", "333   4"]
    with pytest.raises(ValueError, match=r"^row 1 has 1 cells, the header 2$"):
        format_table(["a", "b"], [[1]])
