// bf_kan_index: input code -> (cell, u) of a uniform KAN grid, as bspline.cell_and_u defines it.
//
//   s    = ((x - INDEX_LO) * INDEX_MULT) >>> INDEX_SHIFT      (floor; in units of 2^-U cells)
//   s    = clamp(s, 0, G * 2^U - 1)
//   cell = s >> U,  u = s & (2^U - 1)
//
// Everything is exact two's complement arithmetic on a width that holds every intermediate, so the
// datapath never saturates the index the way the input type would (the public HLS KAN computed the
// index in ap_fixed<16,6> and used 33 of 256 table rows). When a cell spans a power-of-two number of
// input LSBs the emitter passes INDEX_MULT = 1: no multiplier, cell and u are bit slices of x - lo.
//
// Latency: 1 cycle when INDEX_MULT == 1, else 2 (the constant multiply gets its own register).
// REGISTERED = 0 makes the module combinational (latency 0, clk and ce unused): the online learner puts the
// index, the basis ROM and the bank rotation into one front cycle, since its latency counts every cycle.
// All registers advance only while ce is high (the layer's stall signal).
`default_nettype none
module bf_kan_index #(
    parameter integer X_W = 16,
    parameter integer X_SIGNED = 1,
    parameter integer G = 5,
    parameter integer U = 10,
    parameter integer CELL_W = 3,          // bits of a cell number: clog2(G), at least 1
    parameter integer LO_W = 17,           // width of INDEX_LO as a signed number
    parameter signed [LO_W-1:0] INDEX_LO = 0,
    parameter integer MULT_W = 1,
    parameter [MULT_W-1:0] INDEX_MULT = 1,
    parameter integer INDEX_SHIFT = 0,
    parameter integer REGISTERED = 1
) (
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire              clk,  // unused when REGISTERED = 0
    input  wire              ce,
    /* verilator lint_on UNUSEDSIGNAL */
    input  wire [X_W-1:0]    x,
    output wire [CELL_W-1:0] cell_idx,
    output wire [((U > 0) ? U : 1)-1:0] u,
    output wire              in_grid     // the position was inside the grid (not clamped): learners' backprop
);
    localparam integer UW = (U > 0) ? U : 1;
    // x - lo needs one bit above the wider operand (x is widened by one bit when unsigned).
    localparam integer XE_W = X_W + 1;
    localparam integer D_W = ((XE_W > LO_W) ? XE_W : LO_W) + 1;
    localparam integer S_HI = G * (1 << U) - 1;        // largest position inside the grid
    localparam integer S_W = CELL_W + U;               // bits of a clamped position
    localparam integer P_W = ((D_W + MULT_W > S_W) ? D_W + MULT_W : S_W) + 1;

    wire signed [XE_W-1:0] x_ext = (X_SIGNED != 0) ? {x[X_W-1], x} : {1'b0, x};
    wire signed [D_W-1:0]  d = {{(D_W - XE_W){x_ext[XE_W-1]}}, x_ext} - {{(D_W - LO_W){INDEX_LO[LO_W-1]}}, INDEX_LO};

    // Position before the clamp, as a signed P_W-bit number; the multiply stage exists only when needed.
    wire signed [P_W-1:0] pos;
    generate
        if (INDEX_MULT == 1) begin : g_slice
            wire signed [P_W-1:0] d_ext = {{(P_W - D_W){d[D_W-1]}}, d};
            assign pos = d_ext >>> INDEX_SHIFT;
        end else if (REGISTERED != 0) begin : g_mult
            reg signed [P_W-1:0] prod;
            wire signed [MULT_W:0] mult = {1'b0, INDEX_MULT};
            always @(posedge clk) if (ce) prod <= d * mult;
            assign pos = prod >>> INDEX_SHIFT;
        end else begin : g_mult_comb
            wire signed [MULT_W:0] mult = {1'b0, INDEX_MULT};
            wire signed [P_W-1:0] prod = d * mult;
            assign pos = prod >>> INDEX_SHIFT;
        end
    endgenerate

    wire [P_W-1:0] pos_bits = pos;
    wire [S_W-1:0] s_hi_code = S_HI[S_W-1:0];
    wire below = pos_bits[P_W-1];
    wire above;
    generate
        if (S_HI == (1 << S_W) - 1) begin : g_full_span  // G a power of two: the top bits alone decide
            assign above = !below && (|pos_bits[P_W-1:S_W]);
        end else begin : g_partial_span
            assign above = !below && ((|pos_bits[P_W-1:S_W]) || pos_bits[S_W-1:0] > s_hi_code);
        end
    endgenerate
    wire [S_W-1:0] s = below ? {S_W{1'b0}} : (above ? s_hi_code : pos_bits[S_W-1:0]);

    generate
        if (REGISTERED != 0) begin : g_reg
            reg [CELL_W-1:0] cell_q;
            reg [UW-1:0] u_q;
            reg in_q;
            always @(posedge clk) if (ce) cell_q <= s[S_W-1 -: CELL_W];
            always @(posedge clk) if (ce) in_q <= !below && !above;
            assign in_grid = in_q;
            if (U > 0) begin : g_u
                always @(posedge clk) if (ce) u_q <= s[UW-1:0];
            end else begin : g_u0
                always @(posedge clk) if (ce) u_q <= 1'b0;
            end
            assign cell_idx = cell_q;
            assign u = u_q;
        end else begin : g_comb
            assign cell_idx = s[S_W-1 -: CELL_W];
            assign in_grid = !below && !above;
            if (U > 0) begin : g_u
                assign u = s[UW-1:0];
            end else begin : g_u0
                assign u = 1'b0;
            end
        end
    endgenerate
endmodule
`default_nettype wire
