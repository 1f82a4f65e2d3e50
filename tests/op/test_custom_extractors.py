"""ModuleInfoExtractor registration and lookup (fastnnef.op.custom_extractors)."""

from __future__ import annotations

import pytest
from torch import nn

from fastnnef.exceptions import T2NErrorNotFoundModuleExtractor, T2NErrorNotImplemented
from fastnnef.op.custom_extractors import CUSTOMOP_KIND, ModuleInfoExtractor


class Block(nn.Module):
    pass


class SubBlock(Block):
    pass


class Unregistered(nn.Module):
    pass


class BlockExtractor(ModuleInfoExtractor):
    MODULE_CLASS = Block


def test_customop_kind():
    assert CUSTOMOP_KIND == "wired_custom::"
    assert BlockExtractor().op_kind == "wired_custom::Block"


def test_lookup_by_module_is_exact():
    assert type(ModuleInfoExtractor.get_by_module(Block())) is BlockExtractor
    with pytest.raises(T2NErrorNotFoundModuleExtractor) as err:
        ModuleInfoExtractor.get_by_module(SubBlock())  # subclasses are not matched
    assert "no module extractor for SubBlock; registered: [" in str(err.value)
    assert "MODULE_CLASS = SubBlock to add one" in str(err.value)
    assert isinstance(err.value, KeyError)


def test_lookup_by_kind():
    assert type(ModuleInfoExtractor.get_by_kind("wired_custom::Block")) is BlockExtractor
    with pytest.raises(T2NErrorNotFoundModuleExtractor, match="no module extractor for kind 'wired_custom::Unregistered'"):
        ModuleInfoExtractor.get_by_kind("wired_custom::Unregistered")


def test_later_subclass_overrides():
    class Local(nn.Module):
        pass

    class First(ModuleInfoExtractor):
        MODULE_CLASS = Local

    class Second(ModuleInfoExtractor):
        MODULE_CLASS = Local

    assert type(ModuleInfoExtractor.get_by_module(Local())) is Second
    assert type(ModuleInfoExtractor.get_by_kind(CUSTOMOP_KIND + "Local")) is Second


def test_missing_module_class_and_default_conversion():
    class NoClass(ModuleInfoExtractor):
        pass

    with pytest.raises(T2NErrorNotImplemented) as err:
        NoClass()
    assert str(err.value) == (
        "NoClass has no MODULE_CLASS: set it to the nn.Module class this extractor handles"
    )
    with pytest.raises(T2NErrorNotImplemented) as err:
        BlockExtractor().convert_to_nnef(None, None, {}, None, None, None)
    assert str(err.value) == (
        "BlockExtractor.convert_to_nnef is not implemented: override it to emit the NNEF ops "
        "for Block"
    )
