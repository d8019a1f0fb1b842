// bf_max_tree: the largest of N codes, a balanced binary tree of comparators with a register every
// LEVELS_PER_STAGE levels (the layout and timing of bf_adder_tree), for max pooling. bf_argmax_tree is the
// combinational one that also gives the index.
//
// out_data = max of the N elements of in_data (element i at [i*W +: W]), two's complement when SIGNED, else
// unsigned. A signed compare is the unsigned compare of the codes with their sign bits flipped (offset
// binary), so each node is one W-bit comparator and one W-bit multiplexer. What max pooling reads
// (emulate.pool_fixed): the caller feeds padding as the type's smallest code, which never wins over the real
// element every window has (validate: pads are smaller than the kernel) and equals it when it ties.
//
// Latency LATENCY = $clog2(N) / LEVELS_PER_STAGE cycles (integer division); the registers load when en is
// high and have no reset (the caller's valid pipeline says when they mean something). II 1.
`default_nettype none
module bf_max_tree #(
    parameter integer N = 4,
    parameter integer W = 8,
    parameter integer SIGNED = 1,
    parameter integer LEVELS_PER_STAGE = 2
) (
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire           clk,  // unused when LATENCY = 0
    input  wire           en,
    /* verilator lint_on UNUSEDSIGNAL */
    input  wire [N*W-1:0] in_data,
    output wire [W-1:0]   out_data
);
    localparam integer L = $clog2(N);
    /* verilator lint_off UNUSEDPARAM */
    localparam integer LATENCY = L / LEVELS_PER_STAGE;  // documents the formula; the emitter computes it too
    /* verilator lint_on UNUSEDPARAM */
    localparam [W-1:0] FLIP = SIGNED != 0 ? {1'b1, {(W - 1){1'b0}}} : {W{1'b0}};

    function integer nodes_at(input integer lvl);
        integer k;
        begin
            nodes_at = N;
            for (k = 0; k < lvl; k = k + 1) nodes_at = (nodes_at + 1) / 2;
        end
    endfunction

    // Level l is one vector of nodes_at(l) codes; as in bf_adder_tree, one always block per level (not a net
    // per node) keeps Icarus from re-evaluating every reader of a wide net on each slice's change.
    genvar l;
    generate
        for (l = 0; l <= L; l = l + 1) begin : g_level
            wire [nodes_at(l)*W-1:0] v;
            if (l == 0) begin : g_leaves
                assign v = in_data;
            end else begin : g_max
                localparam integer NC = nodes_at(l - 1);
                localparam integer NN = nodes_at(l);
                wire [NC*W-1:0] c = g_level[l-1].v;
                reg [NN*W-1:0] m;
                integer j;
                always @* begin
                    for (j = 0; j < NN; j = j + 1) begin
                        if (2 * j + 1 < NC && (c[(2*j+1)*W +: W] ^ FLIP) > (c[2*j*W +: W] ^ FLIP))
                            m[j*W +: W] = c[(2*j+1)*W +: W];
                        else  // the left child on ties (equal codes: either), an odd one out passed up
                            m[j*W +: W] = c[2*j*W +: W];
                    end
                end
                if (l % LEVELS_PER_STAGE == 0) begin : g_reg
                    reg [NN*W-1:0] r;
                    always @(posedge clk) begin
                        if (en) r <= m;
                    end
                    assign v = r;
                end else begin : g_comb
                    assign v = m;
                end
            end
        end
    endgenerate

    assign out_data = g_level[L].v;
endmodule
`default_nettype wire
