"""Kernel names as ptxas and compute-sanitizer give them."""

from __future__ import annotations

import shutil

import pytest

from orchestrator.cuda.kernels import demangle_all, short_name, split_kernel_name

RACY_SIGNATURE = "reverseTileRacy(const float *, float *, unsigned long)"


def test_kernel_names_keep_the_short_name_and_the_signature():
    assert split_kernel_name(RACY_SIGNATURE) == ("reverseTileRacy", RACY_SIGNATURE)
    assert split_kernel_name("rev") == ("rev", "rev")


def test_the_short_name_drops_return_type_namespace_and_template_arguments():
    assert short_name("void ns::transpose<32, (int)8>(float const*, float*)") == "transpose"
    assert short_name("matmulTiled(const float *, const float *, float *, int)") == "matmulTiled"


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt is not on PATH")
def test_a_mangled_kernel_name_is_demangled():
    # oob.xml's host stack names the stub of wr(float*, int): __device_stub__Z2wrPfi.
    assert split_kernel_name("_Z2wrPfi") == ("wr", "wr(float*, int)")


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt is not on PATH")
def test_many_names_are_demangled_in_one_call_and_plain_names_pass_through():
    assert demangle_all(["_Z2wrPfi", "copyRowMajor", "_Z3revPf"]) == {
        "_Z2wrPfi": "wr(float*, int)", "copyRowMajor": "copyRowMajor", "_Z3revPf": "rev(float*)"}
