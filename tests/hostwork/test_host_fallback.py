"""fade.hostwork.host_fallback on the stand-in device, whose every op runs through it (fade.ocl runs its ops without
an OpenCL kernel through the same function: tests/ocl/device_checks.py checks it there, in a child process).

Registering the stand-in names PrivateUse1 "standin" for the rest of this pytest process, as tests/guard does."""

import pytest
import torch

from fade.hostwork import standin
from fade.hostwork.host_fallback import written_positions


@pytest.fixture(scope="module")
def dev() -> str:
    standin.register()
    return standin.NAME


def test_several_empty_outputs_over_one_zero_byte_storage_each_get_their_own_memory(dev):
    """The zero-byte rule fade.ocl needed first (its zero-byte tensors are views of one storage per device; sort
    into two empty outputs came back overlapping): each zero-byte tensor gets a host storage of its own, so the
    CPU op's resizes cannot put two outputs over one host storage. On the stand-in, views of one empty tensor."""
    x = torch.tensor([3.0, 1.0, 2.0, 5.0, 4.0])
    empty = torch.empty(0, device=dev)
    low, high = empty[:], empty.view(0)
    assert low.untyped_storage()._cdata == high.untyped_storage()._cdata
    torch.aminmax(x.to(dev), out=(low, high))
    assert low.cpu().item() == 1.0 and high.cpu().item() == 5.0
    values, indices = torch.empty(0, device=dev), torch.empty(0, dtype=torch.long, device=dev)
    torch.sort(x.to(dev), out=(values, indices))
    assert torch.equal(values.cpu(), torch.sort(x).values) and torch.equal(indices.cpu(), torch.sort(x).indices)


def test_an_out_argument_that_is_a_strided_view_is_written_through_its_strides(dev):
    """The stand-in once resized every out= argument to empty first (for placeholder outputs torch no longer
    hands a backend): a column as out= then got contiguous strides and the op wrote the first row instead."""
    x = torch.tensor([3.0, 1.0, 2.0, 5.0, 4.0])
    base, expected = torch.zeros(5, 2, device=dev), torch.zeros(5, 2)
    column = base[:, 0]
    assert torch.cumsum(x.to(dev), 0, out=column) is column
    torch.cumsum(x, 0, out=expected[:, 0])
    assert torch.equal(base.cpu(), expected) and column.stride() == (2,)


def test_a_python_number_in_a_tensor_argument_reaches_the_cpu_op_as_a_tensor(dev):
    """torch hands a Python backend `x % 3`'s wrapped 3 as a number; the op called again needs a tensor."""
    x = torch.arange(6.0)
    assert torch.equal((x.to(dev) % 3).cpu(), x % 3)
    assert torch.equal(torch.fmod(x.to(dev), 2).cpu(), torch.fmod(x, 2))
    assert torch.equal(torch.bitwise_and(torch.arange(6).to(dev), 3).cpu(), torch.bitwise_and(torch.arange(6), 3))


def test_in_place_out_views_resize_and_set_keep_their_aliasing(dev):
    base = torch.arange(10.0).to(dev)
    view = base[2:6]
    assert view.cumsum_(0) is view  # in place, through the fallback: the caller's tensor, its storage
    expected = torch.arange(10.0)
    expected[2:6].cumsum_(0)
    assert torch.equal(base.cpu(), expected)
    grown = torch.ones(2, device=dev)
    alias = grown[:1]
    grown.resize_(6)  # a storage that grows gets a new one; the shorter view keeps the old
    assert grown.shape == (6,) and alias.cpu().item() == 1.0
    target, source = torch.zeros(3, device=dev), torch.arange(4.0).to(dev)
    target.set_(source)  # set_ onto another argument's storage: an alias of it, as on the CPU
    source.add_(1)
    assert target.untyped_storage()._cdata == source.untyped_storage()._cdata
    assert torch.equal(target.cpu(), torch.arange(4.0) + 1)


def test_copies_both_ways_and_a_resizing_copy(dev):
    x = torch.randn(3, 4)
    on = x.to(dev)
    back = torch.empty(3, 4)
    assert back.copy_(on) is back and torch.equal(back, x)
    target = torch.empty(0, device=dev)
    torch.ops.aten._copy_from_and_resize(x, target)
    assert target.shape == (3, 4) and torch.equal(target.cpu(), x)


def test_written_positions_read_the_schema():
    aten = torch.ops.aten
    assert written_positions(aten.add_.Tensor) == ((0, "self", False),)
    assert written_positions(aten.sort.values) == ((3, "values", True), (4, "indices", True))
    assert written_positions(aten.add.Tensor) == ()


def test_the_storage_table_sweeps_a_young_generation_and_the_old_one_now_and_then(dev):
    """fade.hostwork.storages.StorageTable (fade.ocl's and the stand-in's): a full sweep of the young generation
    finds the storages that died since, an entry that outlives PROMOTE_AFTER full sweeps leaves the generation,
    so its death is found by a sweep asking for everything (or every OLD_EVERY-th full sweep), not by the young
    one; a sweep of the newest entries finds only those."""
    from fade.hostwork.storages import StorageTable

    table = StorageTable(dev)
    device = torch.device(dev, 0)

    def make(label):
        host = torch.empty(4, dtype=torch.uint8).untyped_storage()
        return table.new_tensor(label, host.data_ptr(), 4, device, torch.uint8, 0, [4], [1]), host

    hosts = []
    kept, host = make("kept")
    hosts.append(host)
    for _ in range(table.PROMOTE_AFTER):
        assert table.sweep(old=False) == []
    short, host = make("short")
    hosts.append(host)
    newest, host = make("newest")
    hosts.append(host)
    del newest
    assert table.sweep(young=1) == ["newest"]
    del short, kept  # "kept" has left the young generation: a young sweep does not see it die
    assert table.sweep(old=False) == ["short"]
    assert len(table) == 1
    found = [table.sweep(old=False) for _ in range(table.OLD_EVERY)]
    assert found.count(["kept"]) == 1 and len(table) == 0  # on the OLD_EVERY-th full sweep
    again, host = make("again")
    hosts.append(host)
    for _ in range(table.PROMOTE_AFTER):
        table.sweep(old=False)
    del again
    assert table.sweep(old=True) == ["again"] and len(table) == 0
