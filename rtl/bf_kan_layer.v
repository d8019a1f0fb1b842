// bf_kan_layer: a pure-spline KAN layer for inference, bit-exact with emulate.kan_fixed.
//
//   y_o = requant( overflow_acc( sum_i sum_m c[o, i, cell_i + m] * b_m(u_i) ) )
//
// Per input: bf_kan_index finds (cell, u) (a bit slice when INDEX_MULT = 1), the basis comes from the
// closed-form circuit (BASIS_CLOSED = 1) or a ROM of the golden table, and a coefficient bank per
// (output, input, m) selects c[o, i, cell + m] by the cell (the coefficients are constants: inference).
// The N_IN * (K + 1) exact products per output are summed exactly (SUM_W holds any sum), the sum gets
// the accumulator type's overflow, then the output type's rounding and overflow (both bf_requant).
//
// Stream: element i of in_data at [i*X_W +: X_W], output o of out_data at [o*Y_W +: Y_W]. Pipelined,
// II = 1; one clock enable stalls every register while a result waits (ce = !out_valid || out_ready),
// so out_data holds until taken and in_ready = ce.
// Latency (register stages from acceptance to out_valid):
//   LAT_INDEX (1, or 2 when INDEX_MULT != 1) + LAT_BASIS (ROM 1; closed form K=1: 1, K=2: 2, K=3: 4)
//   + 1 (products) + 1 (sum) + 1 (overflow and requantize into the output register).
// The sum of the N_IN * (K + 1) products is one combinational adder chain: fine for the small fan-in of KAN
// layers, the first thing to pipeline for wide ones. BASIS_CLOSED = 1 needs U >= 1 and K <= 3.
`default_nettype none
module bf_kan_layer #(
    parameter integer N_IN = 1,
    parameter integer N_OUT = 1,
    parameter integer X_W = 16,
    parameter integer X_SIGNED = 1,
    parameter integer G = 5,
    parameter integer K = 3,
    parameter integer U = 10,
    parameter integer CELL_W = 3,
    parameter integer LO_W = 17,
    parameter signed [LO_W-1:0] INDEX_LO = 0,
    parameter integer MULT_W = 1,
    parameter [MULT_W-1:0] INDEX_MULT = 1,
    parameter integer INDEX_SHIFT = 0,
    parameter integer C_W = 16,
    parameter integer C_SIGNED = 1,
    parameter [N_OUT*N_IN*(G+K)*C_W-1:0] COEFFS = 0,  // c[o, i, j] at [((o*N_IN + i)*(G+K) + j)*C_W +: C_W]
    parameter integer B_W = 13,
    parameter integer B_FRAC = 12,
    parameter integer BASIS_CLOSED = 1,
    parameter [(1 << U)*(K+1)*B_W-1:0] BASIS_TABLE = 0,  // used when BASIS_CLOSED = 0
    parameter integer ACC_W = 32,
    parameter integer ACC_FRAC = 22,
    parameter integer ACC_SIGNED = 1,
    parameter integer ACC_OVERFLOW = 0,
    parameter integer Y_W = 16,
    parameter integer Y_FRAC = 10,
    parameter integer Y_SIGNED = 1,
    parameter integer Y_ROUNDING = 0,
    parameter integer Y_OVERFLOW = 0
) (
    input  wire                  clk,
    input  wire                  rst,
    input  wire                  in_valid,
    output wire                  in_ready,
    input  wire [N_IN*X_W-1:0]   in_data,
    output wire                  out_valid,
    input  wire                  out_ready,
    output wire [N_OUT*Y_W-1:0]  out_data
);
    function integer clog2;
        input integer v;
        integer n;
        begin
            n = 0;
            while ((1 << n) < v) n = n + 1;
            clog2 = n;
        end
    endfunction

    localparam integer NB = G + K;
    localparam integer UW = (U > 0) ? U : 1;
    localparam integer LAT_INDEX = (INDEX_MULT == 1) ? 1 : 2;
    localparam integer LAT_BASIS = (BASIS_CLOSED == 0) ? 1 : ((K == 1) ? 1 : ((K == 2) ? 2 : 4));
    localparam integer LATENCY = LAT_INDEX + LAT_BASIS + 3;
    localparam integer TERMS = N_IN * (K + 1);
    localparam integer P_W = C_W + B_W + 2;  // signed (C_W+1) x signed (B_W+1) bits
    localparam integer SUM_W = P_W + clog2(TERMS);

    // -- stall control: every register advances together -------------------------------------------
    wire ce = !out_valid || out_ready;
    assign in_ready = ce;
    reg [LATENCY-1:0] valid;
    always @(posedge clk) begin
        if (rst) valid <= {LATENCY{1'b0}};
        else if (ce) valid <= {valid[LATENCY-2:0], in_valid};
    end
    assign out_valid = valid[LATENCY-1];

    // -- per input: index, basis, coefficient banks, products -------------------------------------
    wire [N_OUT*TERMS*P_W-1:0] prods;  // product (o, i, m) at [((o*N_IN + i)*(K+1) + m)*P_W +: P_W]

    genvar i, o, m;
    generate
        for (i = 0; i < N_IN; i = i + 1) begin : g_in
            wire [CELL_W-1:0] cell_idx;
            wire [UW-1:0] u;
            /* verilator lint_off UNUSEDSIGNAL */
            wire in_grid_unused;  // inference clamps silently; only the learners' backprop needs it
            /* verilator lint_on UNUSEDSIGNAL */
            bf_kan_index #(.X_W(X_W), .X_SIGNED(X_SIGNED), .G(G), .U(U), .CELL_W(CELL_W), .LO_W(LO_W),
                           .INDEX_LO(INDEX_LO), .MULT_W(MULT_W), .INDEX_MULT(INDEX_MULT),
                           .INDEX_SHIFT(INDEX_SHIFT))
                u_index (.clk(clk), .ce(ce), .x(in_data[i*X_W +: X_W]), .cell_idx(cell_idx), .u(u),
                         .in_grid(in_grid_unused));

            wire [(K+1)*B_W-1:0] b;
            if (BASIS_CLOSED != 0) begin : g_closed
                bf_kan_basis_closed #(.K(K), .U(U), .B_W(B_W), .B_FRAC(B_FRAC))
                    u_basis (.clk(clk), .ce(ce), .u(u), .b(b));
            end else begin : g_rom
                bf_kan_basis_rom #(.K(K), .U(U), .B_W(B_W), .TABLE(BASIS_TABLE))
                    u_basis (.clk(clk), .ce(ce), .u(u), .b(b));
            end

            // The cell waits LAT_BASIS - 1 cycles so the coefficient registers load with the basis registers.
            wire [CELL_W-1:0] cell_d;
            if (LAT_BASIS > 2) begin : g_delay
                localparam integer DW = (LAT_BASIS - 1) * CELL_W;
                reg [DW-1:0] pipe;  // oldest cell on top
                always @(posedge clk) if (ce) pipe <= {pipe[DW-CELL_W-1:0], cell_idx};
                assign cell_d = pipe[DW-1 -: CELL_W];
            end else if (LAT_BASIS == 2) begin : g_delay1
                reg [CELL_W-1:0] pipe;
                always @(posedge clk) if (ce) pipe <= cell_idx;
                assign cell_d = pipe;
            end else begin : g_now
                assign cell_d = cell_idx;
            end

            for (o = 0; o < N_OUT; o = o + 1) begin : g_edge
                for (m = 0; m <= K; m = m + 1) begin : g_bank
                    // Bank m of edge (o, i): coefficient cell + m, a constant mux over the G cells.
                    localparam integer BASE = (o*N_IN + i)*NB + m;
                    wire [31:0] j_sel = BASE + {{(32-CELL_W){1'b0}}, cell_d};
                    reg [C_W-1:0] coef;
                    always @(posedge clk) if (ce) coef <= COEFFS[j_sel*C_W +: C_W];
                    wire signed [C_W:0] cx = (C_SIGNED != 0) ? {coef[C_W-1], coef} : {1'b0, coef};
                    wire signed [B_W:0] bx = {1'b0, b[m*B_W +: B_W]};
                    reg signed [P_W-1:0] prod;
                    always @(posedge clk) if (ce) prod <= cx * bx;
                    assign prods[((o*N_IN + i)*(K+1) + m)*P_W +: P_W] = prod;
                end
            end
        end
    endgenerate

    // -- per output: exact sum, accumulator overflow, requantize ----------------------------------
    generate
        for (o = 0; o < N_OUT; o = o + 1) begin : g_out
            reg signed [SUM_W-1:0] sum_next, sum;
            integer t;
            always @* begin
                sum_next = {SUM_W{1'b0}};
                for (t = 0; t < TERMS; t = t + 1)
                    sum_next = sum_next + {{(SUM_W-P_W){prods[(o*TERMS + t)*P_W + P_W - 1]}},
                                           prods[(o*TERMS + t)*P_W +: P_W]};
            end
            always @(posedge clk) if (ce) sum <= sum_next;

            // The accumulator type keeps the sum's binary point: only its overflow mode acts here.
            wire [ACC_W-1:0] acc;
            bf_requant #(.IN_W(SUM_W), .IN_FRAC(ACC_FRAC), .IN_SIGNED(1),
                         .OUT_W(ACC_W), .OUT_FRAC(ACC_FRAC), .OUT_SIGNED(ACC_SIGNED),
                         .OUT_ROUNDING(0), .OUT_OVERFLOW(ACC_OVERFLOW))
                u_acc (.in_code(sum), .out_code(acc));
            wire [Y_W-1:0] y;
            bf_requant #(.IN_W(ACC_W), .IN_FRAC(ACC_FRAC), .IN_SIGNED(ACC_SIGNED),
                         .OUT_W(Y_W), .OUT_FRAC(Y_FRAC), .OUT_SIGNED(Y_SIGNED),
                         .OUT_ROUNDING(Y_ROUNDING), .OUT_OVERFLOW(Y_OVERFLOW))
                u_out (.in_code(acc), .out_code(y));
            reg [Y_W-1:0] y_r;
            always @(posedge clk) if (ce) y_r <= y;
            assign out_data[o*Y_W +: Y_W] = y_r;
        end
    endgenerate
endmodule
`default_nettype wire
