// bf_argmax_tree: the largest of N codes and the index of its first occurrence, a comparator tree;
// combinational.
//
// Level 0 holds the elements with their indices; each level pairs neighbours (an odd one out passes up), and
// the right (higher-index) node wins only when strictly greater, so on ties the lower index survives every
// level: the index is numpy's argmax (the first maximum). $clog2(N) comparator levels, signed or unsigned
// codes (SIGNED). Latency 0: the caller registers max / index (bf_argmax, bf_softmax). (bf_max_tree is the
// pipelined max without an index, for max pooling.)
`default_nettype none
module bf_argmax_tree #(
    parameter integer N = 4,
    parameter integer W = 8,
    parameter integer SIGNED = 1,
    parameter integer IW = N > 1 ? $clog2(N) : 1
) (
    input  wire [N*W-1:0] in_data,
    output wire [W-1:0]   max,
    output wire [IW-1:0]  index
);
    localparam integer L = $clog2(N);

    function integer nodes_at(input integer lvl);
        integer k;
        begin
            nodes_at = N;
            for (k = 0; k < lvl; k = k + 1) nodes_at = (nodes_at + 1) / 2;
        end
    endfunction

    genvar l, j;
    generate
        for (l = 0; l <= L; l = l + 1) begin : g_level
            localparam integer M = nodes_at(l);
            wire [M*W-1:0] val;
            wire [M*IW-1:0] idx;
            for (j = 0; j < M; j = j + 1) begin : g_node
                if (l == 0) begin : g_leaf
                    localparam [IW-1:0] J = j;
                    assign val[j*W +: W] = in_data[j*W +: W];
                    assign idx[j*IW +: IW] = J;
                end else if (2 * j + 1 < nodes_at(l - 1)) begin : g_pair
                    wire [W-1:0] a = g_level[l-1].val[2*j*W +: W];
                    wire [W-1:0] b = g_level[l-1].val[(2*j+1)*W +: W];
                    wire b_wins = SIGNED != 0 ? ($signed(b) > $signed(a)) : (b > a);
                    assign val[j*W +: W] = b_wins ? b : a;
                    assign idx[j*IW +: IW] = b_wins ? g_level[l-1].idx[(2*j+1)*IW +: IW]
                                                    : g_level[l-1].idx[2*j*IW +: IW];
                end else begin : g_pass
                    assign val[j*W +: W] = g_level[l-1].val[2*j*W +: W];
                    assign idx[j*IW +: IW] = g_level[l-1].idx[2*j*IW +: IW];
                end
            end
        end
    endgenerate
    assign max = g_level[L].val;
    assign index = g_level[L].idx;
endmodule
`default_nettype wire
