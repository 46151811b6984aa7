"""The graph mode's pure planning (fade.ocl.graph_fusion), with no OpenCL device: which elementwise nodes share
a kernel, when values are dropped, and the generated kernel's source."""

import torch

from fade.ocl.graph_fusion import fused_source, geometry, group_elementwise, MAX_MEMBERS, Member, NodeInfo, \
    release_after


def _chain(spec):
    """NodeInfos from (fusible, shape, inputs) triples, users filled in."""
    users = {i: [] for i in range(len(spec))}
    for position, (_, _, inputs) in enumerate(spec):
        for i in inputs:
            users[i].append(position)
    return [NodeInfo(fusible, shape, tuple(inputs), tuple(users[i])) for i, (fusible, shape, inputs) in
            enumerate(spec)]


S, T = (2, 8), (2, 1)


def test_a_chain_of_elementwise_nodes_is_one_group_and_a_kernel_node_cuts_it():
    nodes = _chain([(False, S, []),        # 0 input
                    (True, S, [0]),        # 1 relu
                    (True, S, [1, 0]),     # 2 add
                    (True, S, [2]),        # 3 sigmoid
                    (False, S, [3]),       # 4 a convolution
                    (True, S, [4, 3])])    # 5 mul: reads 3 across the kernel node, a group of its own
    assert group_elementwise(nodes) == [[1, 2, 3], [5]]


def test_a_reader_outside_the_group_before_its_end_stops_the_group():
    # 2 reads 1 and runs before 3 would: 3 cannot join 1's group (the kernel would run after 2 needs 1's value)
    nodes = _chain([(False, S, []), (True, S, [0]), (False, S, [1]), (True, S, [1, 2])])
    assert group_elementwise(nodes) == [[1], [3]]


def test_a_node_joins_the_groups_it_can_when_another_had_an_early_reader():
    # a residual block's end: 1 (the last block's output) is read by the convolution 2 before the add 4; the bias
    # add 3 is read only by 4, so 4 joins 3's group and 1's stays apart
    nodes = _chain([(False, S, []), (True, S, [0]), (False, S, [1]), (True, S, [2]), (True, S, [3, 1]),
                    (True, S, [4])])
    assert group_elementwise(nodes) == [[1], [3, 4, 5]]


def test_other_shapes_do_not_join_but_broadcast_inputs_do():
    nodes = _chain([(False, S, []), (False, T, []),
                    (True, T, [1]),        # 2 on the (2, 1) shape
                    (True, S, [0, 2]),     # 3 broadcasts 2: its own group, 2 an input of it
                    (True, S, [3])])
    assert group_elementwise(nodes) == [[2], [3, 4]]


def test_two_branches_merge_into_the_node_that_joins_them():
    nodes = _chain([(False, S, []), (True, S, [0]), (True, S, [0]), (True, S, [1, 2])])
    assert group_elementwise(nodes) == [[1, 2, 3]]


def test_groups_stop_at_the_member_limit():
    spec = [(False, S, [])] + [(True, S, [i]) for i in range(MAX_MEMBERS + 5)]
    groups = group_elementwise(_chain(spec))
    assert [len(g) for g in groups] == [MAX_MEMBERS, 5]
    assert sorted(m for g in groups for m in g) == list(range(1, MAX_MEMBERS + 6))


def test_values_are_released_after_their_last_reader_and_outputs_never():
    reads = [[0, 1], [1, 2], [2, 3], [3]]
    assert release_after(reads, keep={3}) == [[0], [1], [2], []]
    assert release_after(reads, keep=set()) == [[0], [1], [2], [3]]


def test_the_fused_source_computes_members_in_registers_and_stores_only_outputs():
    members = [Member("a + alpha * b", (("input", 0), ("input", 1)), (("alpha", 0),), torch.float32, torch.float32),
               Member("((a != a || a > 0) ? a : 0)", (("member", 0),), (), torch.float32, torch.float32),
               Member("a > b", (("member", 1), ("scalar", 1)), (), torch.float32, torch.bool)]
    x, bias = torch.empty(4, 3, 5), torch.empty(3, 1)
    sizes, strides = geometry((4, 3, 5), [(15, 5, 1), (15, 5, 1)], [x, bias])
    assert sizes == [4, 3, 5] and strides[3] == [0, 1, 0]  # the bias broadcast over the batch and the row
    source = fused_source(members, [torch.float32, torch.float32], [torch.float32, torch.float32], [1, 2],
                          sizes, strides)
    assert "__kernel void fused(__global float* out0, long off_o0, __global uchar* out1, long off_o1" in source
    assert "float x1 = in1[off_i1 + i1 * 1];" in source
    assert "v1 = (float)(((a != a || a > 0) ? a : 0));" in source
    assert "v2 = (uchar)((float)(a > b) != 0);" in source  # stored as eager stores a bool
    assert "out0[" in source and "out1[" in source and "v0;" not in source.split("out0[")[1].split(";")[0]
    assert "if (i >= 60) return;" in source


def test_contiguous_operands_collapse_to_one_dimension_and_double_drops_float_literals():
    x = torch.empty(2, 3, 4)
    sizes, strides = geometry((2, 3, 4), [(12, 4, 1)], [x])
    assert sizes == [24] and strides == [[1], [1]]
    member = Member("0.5f * a", (("input", 0),), (), torch.float64, torch.float64)
    source = fused_source([member], [torch.float64], [], [0], sizes, strides)
    assert "0.5 * a" in source and "0.5f" not in source and "double x0 = in0[off_i0 + i0 * 1];" in source


def test_a_channels_last_result_is_visited_in_its_memory_order():
    # neighbouring work items write neighbouring addresses: [n, c, h, w] stored channels-last runs as [n*h*w, c]
    out = torch.empty(2, 8, 4, 4).to(memory_format=torch.channels_last)
    bias = torch.empty(8, 1, 1)
    sizes, strides = geometry(out.shape, [out.stride()], [out, bias])
    assert sizes == [32, 8] and strides == [[8, 1], [8, 1], [0, 1]]
    nchw = torch.empty(2, 8, 4, 4)  # an input in the logical order is read 8 apart, the output still written in order
    sizes, strides = geometry(out.shape, [out.stride()], [nchw])
    assert sizes == [2, 16, 8] and strides == [[128, 8, 1], [128, 1, 16]]
