// bf_table_rom: y = TABLE[clamp((x - INDEX_LO) >> SHIFT, 0, ENTRIES - 1)], read through a register
// (tables.lookup: the Table op's rule, and Softmax's exp and reciprocal lookups).
//
// The index is exact: x (signed or unsigned) minus the constant INDEX_LO in D_W bits, an arithmetic (floor)
// shift right, then the clamp, compared in Q_W bits so that neither end can wrap. TABLE packs entry e at
// [e*Y_W +: Y_W]. The ROM is a memory initialised from the parameter and read through a register that loads
// when ce is high: the form yosys maps to block RAM (or LUT ROM), as bf_kan_basis_rom. Latency 1.
`default_nettype none
module bf_table_rom #(
    parameter integer X_W = 8,
    parameter integer X_SIGNED = 1,
    parameter integer LO_W = 8,
    parameter [LO_W-1:0] INDEX_LO = {LO_W{1'b0}},  // two's complement
    parameter integer SHIFT = 0,
    parameter integer ENTRIES = 4,
    parameter integer Y_W = 8,
    parameter [ENTRIES*Y_W-1:0] TABLE = {ENTRIES*Y_W{1'b0}}
) (
    input  wire           clk,
    input  wire           ce,
    input  wire [X_W-1:0] x,
    output reg  [Y_W-1:0] y
);
    localparam integer AW = ENTRIES > 1 ? $clog2(ENTRIES) : 1;
    localparam integer XS_W = X_W + (X_SIGNED != 0 ? 0 : 1);       // signed view of x
    localparam integer D_W = (XS_W > LO_W ? XS_W : LO_W) + 1;        // x - INDEX_LO, exact
    localparam integer Q_W = (D_W > AW + 1 ? D_W : AW + 1) + 1;      // room for ENTRIES - 1 beside it

    reg [Y_W-1:0] rom [0:ENTRIES-1];
    integer e;
    initial begin
        for (e = 0; e < ENTRIES; e = e + 1) rom[e] = TABLE[e*Y_W +: Y_W];
    end

    wire [XS_W-1:0] xs;
    generate
        if (X_SIGNED != 0) begin : g_signed
            assign xs = x;
        end else begin : g_unsigned
            assign xs = {1'b0, x};
        end
    endgenerate
    wire signed [D_W-1:0] d = $signed({{(D_W - XS_W){xs[XS_W-1]}}, xs})
                              - $signed({{(D_W - LO_W){INDEX_LO[LO_W-1]}}, INDEX_LO});
    wire signed [Q_W-1:0] q = $signed({{(Q_W - D_W){d[D_W-1]}}, d}) >>> SHIFT;
    /* verilator lint_off WIDTHTRUNC */
    /* verilator lint_off WIDTHEXPAND */
    localparam [Q_W-1:0] TOP = ENTRIES - 1;  // an integer, in Q_W bits (fewer or more than 32)
    /* verilator lint_on WIDTHEXPAND */
    /* verilator lint_on WIDTHTRUNC */
    // Past the clamp only the low AW bits are read.
    /* verilator lint_off UNUSEDSIGNAL */
    wire [Q_W-1:0] idx = q[Q_W-1] ? {Q_W{1'b0}} : (q > $signed(TOP) ? TOP : q);
    /* verilator lint_on UNUSEDSIGNAL */
    always @(posedge clk) if (ce) y <= rom[idx[AW-1:0]];
endmodule
`default_nettype wire
