// bf_adder_tree: exact sum of N codes, a balanced binary tree with a register every LEVELS_PER_STAGE levels.
//
// out_data = sum of the N elements of in_data (element i at [i*IN_W +: IN_W]), exact: level l holds
// IN_W + l bits and the tree has L = $clog2(N) levels, so out_data has IN_W + $clog2(N) bits and never
// overflows (two values of w bits sum to w + 1 bits; an odd element out is passed up, widened). Signed or
// unsigned elements (IN_SIGNED). Nothing here rounds or saturates: the caller requantizes once at the end,
// which is what the golden model does (overflow applies to the final sum, not to partial sums).
//
// Latency LATENCY = L / LEVELS_PER_STAGE cycles (integer division): the results of levels LEVELS_PER_STAGE,
// 2 * LEVELS_PER_STAGE, ... are registered, loading when en is high; levels after the last register are
// combinational, so the caller can put its own register after them. II 1. The registers have no reset:
// they hold data only, and the caller's valid pipeline says when they mean something.
`default_nettype none
module bf_adder_tree #(
    parameter integer N = 4,
    parameter integer IN_W = 8,
    parameter integer IN_SIGNED = 1,
    parameter integer LEVELS_PER_STAGE = 1
) (
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire                          clk,  // unused when LATENCY = 0
    input  wire                          en,
    /* verilator lint_on UNUSEDSIGNAL */
    input  wire [N*IN_W-1:0]             in_data,
    output wire [IN_W+$clog2(N)-1:0]     out_data
);
    localparam integer L = $clog2(N);
    /* verilator lint_off UNUSEDPARAM */
    localparam integer LATENCY = L / LEVELS_PER_STAGE;  // documents the formula; the emitter computes it too
    /* verilator lint_on UNUSEDPARAM */

    // Nodes of level `lvl`: N halved (rounding up) lvl times.
    function integer nodes_at(input integer lvl);
        integer k;
        begin
            nodes_at = N;
            for (k = 0; k < lvl; k = k + 1) nodes_at = (nodes_at + 1) / 2;
        end
    endfunction

    // Level l is one vector, g_level[l].v, of nodes_at(l) nodes of IN_W + l bits; level l + 1 reads level l.
    // Each level's adders are one always block over whole vectors, not one net per node: Icarus propagates
    // a change of any slice of a wide net to every reader of that net, so per-node nets made each cycle cost
    // O(N^2) evaluations (a 64-leaf tree ran ~5x slower). Synthesis sees the same two-input adders.
    genvar l;
    generate
        for (l = 0; l <= L; l = l + 1) begin : g_level
            wire [nodes_at(l)*(IN_W+l)-1:0] v;
            if (l == 0) begin : g_leaves
                assign v = in_data;
            end else begin : g_sums
                localparam integer CW = IN_W + l - 1;  // width of the children
                localparam integer NC = nodes_at(l - 1);
                localparam integer NN = nodes_at(l);
                wire [NC*CW-1:0] c = g_level[l-1].v;
                // Kept, so each node stays a two-input carry-chain adder: yosys would otherwise merge
                // the levels between registers into one multi-operand $macc of LUT full adders, which
                // costs about twice as many LUTs on FPGAs with carry chains.
                (* keep *) reg [NN*(CW+1)-1:0] sum;
                integer j;
                always @* begin
                    for (j = 0; j < NN; j = j + 1) begin
                        if (2 * j + 1 < NC)  // a pair, each child sign-extended (or zero-extended) by one bit
                            sum[j*(CW+1) +: CW+1] = {IN_SIGNED != 0 && c[2*j*CW + CW-1], c[2*j*CW +: CW]}
                                                  + {IN_SIGNED != 0 && c[(2*j+1)*CW + CW-1], c[(2*j+1)*CW +: CW]};
                        else  // the odd one out, passed up widened
                            sum[j*(CW+1) +: CW+1] = {IN_SIGNED != 0 && c[2*j*CW + CW-1], c[2*j*CW +: CW]};
                    end
                end
                if (l % LEVELS_PER_STAGE == 0) begin : g_reg
                    reg [NN*(CW+1)-1:0] r;
                    always @(posedge clk) begin
                        if (en) r <= sum;
                    end
                    assign v = r;
                end else begin : g_comb
                    assign v = sum;
                end
            end
        end
    endgenerate

    assign out_data = g_level[L].v;
endmodule
`default_nettype wire
