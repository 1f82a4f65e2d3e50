"""VariableNamingScheme (fastnnef.torch_graph.ir_naming)."""

from fastnnef.torch_graph.ir_naming import DEFAULT_VARNAME_SCHEME, VariableNamingScheme


def test_members_and_default():
    assert {m.name: m.value for m in VariableNamingScheme} == {
        "RAW": "raw",
        "NATURAL_VERBOSE": "natural_verbose",
        "NATURAL_VERBOSE_CAMEL": "natural_verbose_camel",
        "NUMERIC": "numeric",
    }
    assert VariableNamingScheme.default() is VariableNamingScheme.NATURAL_VERBOSE
    assert DEFAULT_VARNAME_SCHEME is VariableNamingScheme.NATURAL_VERBOSE


def test_plain_strings_work_where_the_enum_does():
    assert VariableNamingScheme("numeric") is VariableNamingScheme.NUMERIC
    assert VariableNamingScheme.NATURAL_VERBOSE_CAMEL == "natural_verbose_camel"
