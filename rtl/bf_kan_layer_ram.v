// bf_kan_layer_ram: bf_kan_layer with its coefficients in writable memories (--weights ram).
//
// Computes exactly what bf_kan_layer computes (emulate.kan_fixed, for any coefficient codes of the C_* type:
// every width follows from the types), with the same latency and II 1: index, basis, a coefficient read on
// the edge where bf_kan_layer loads its coefficient registers, products, exact sum, requantize.
//
// Memories: the online KAN learner's cyclic banks (toolchain/backends/rtl/learner_kan.py). Per input i the
// G + K coefficients of every output sit in K1 = K + 1 banks: bank j holds coefficient p with p mod K1 = j
// at row p div K1, the N_OUT outputs side by side in one word (output o at [o*C_W +: C_W]). The K + 1
// coefficients a cell needs, cell .. cell + K, are then in K + 1 different banks, one read per bank per
// sample: bank j reads row cell div K1 + (j < cell mod K1), synchronously (the block-RAM form; RAM_STYLE = 1
// asks for block RAM, 0 leaves it to synthesis), and its coefficient is that of basis weight
// m = (j - cell) mod K1, so the basis weights are rotated into bank order (one small multiplexer per bank
// on the basis side, shared by every output) instead of the wide coefficient words. A bank of one row is a
// plain register read as it is (it changes only between samples).
//
// Write port: one code per clock, wr_data sign-extended to DATA_W bits (the low C_W are read). This layer owns
// the addresses C_BASE + ((i*K1 + j) * OD + o) * RD + row (N_IN * K1 * OD * RD words; OD = 2**clog2(N_OUT),
// RD = 2**clog2(rows)): fields that are powers of two decode by bit slicing, so the port costs one
// subtractor, one range compare and a bank compare per bank. Words whose field is past N_OUT or the rows,
// or whose coefficient p is past G + K - 1, are padding: ignored by the datapath. The host packs words in
// this order (toolchain/backends/rtl/weights_layout.py). Writes happen only while no sample is in flight.
// Initial contents: COEFFS (c[o, i, j] row-major, as bf_kan_layer's parameter).
`default_nettype none
module bf_kan_layer_ram #(
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
    parameter integer Y_OVERFLOW = 0,
    parameter integer RAM_STYLE = 0,
    parameter integer ADDR_W = 8,          // the device's weight address bits
    parameter integer DATA_W = 16,         // the device's weight word bits (>= C_W)
    parameter integer C_BASE = 0       // first address of this layer's coefficient region
) (
    input  wire                  clk,
    input  wire                  rst,
    input  wire                  in_valid,
    output wire                  in_ready,
    input  wire [N_IN*X_W-1:0]   in_data,
    output wire                  out_valid,
    input  wire                  out_ready,
    output wire [N_OUT*Y_W-1:0]  out_data,
    input  wire                  wr_en,
    input  wire [ADDR_W-1:0]         wr_addr,
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire [DATA_W-1:0]         wr_data  // the low C_W bits are the code
    /* verilator lint_on UNUSEDSIGNAL */
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
    localparam integer K1 = K + 1;                 // banks per input
    localparam integer ROWS = (NB + K1 - 1) / K1;  // rows per bank
    localparam integer RA = clog2(ROWS);           // row address bits (RD = 2**RA)
    localparam integer OA = clog2(N_OUT);          // output field bits (OD = 2**OA)
    localparam integer MW = K1 > 1 ? clog2(K1) : 1;
    localparam integer WORD = N_OUT * C_W;

    // Row r of bank j of input i: coefficient p = j + K1 * r of every output (zero past G + K - 1).
    function [WORD-1:0] bank_word(input integer i, input integer j, input integer r);
        integer o, p;
        begin
            bank_word = {WORD{1'b0}};
            p = j + K1 * r;
            if (p < NB)
                for (o = 0; o < N_OUT; o = o + 1)
                    bank_word[o*C_W +: C_W] = COEFFS[((o*N_IN + i)*NB + p)*C_W +: C_W];
        end
    endfunction

    // -- the write port: which bank, output and row -----------------------------------------------
    /* verilator lint_off WIDTHEXPAND */
    /* verilator lint_off WIDTHTRUNC */
    wire [ADDR_W:0] w_off = {1'b0, wr_addr} - C_BASE;  // wraps (top bit set) below the region
    wire w_hit = wr_en && w_off < N_IN * K1 * (1 << (OA + RA));
    wire [ADDR_W:0] w_bank = w_off >> (OA + RA);
    wire [ADDR_W:0] w_out = (w_off >> RA) & ((1 << OA) - 1);
    /* verilator lint_on WIDTHTRUNC */
    /* verilator lint_on WIDTHEXPAND */
    wire [C_W-1:0] w_code = wr_data[C_W-1:0];

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

    genvar i, o, j;
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
                localparam integer PIPE_W = (LAT_BASIS - 1) * CELL_W;
                reg [PIPE_W-1:0] pipe;  // oldest cell on top
                always @(posedge clk) if (ce) pipe <= {pipe[PIPE_W-CELL_W-1:0], cell_idx};
                assign cell_d = pipe[PIPE_W-1 -: CELL_W];
            end else if (LAT_BASIS == 2) begin : g_delay1
                reg [CELL_W-1:0] pipe;
                always @(posedge clk) if (ce) pipe <= cell_idx;
                assign cell_d = pipe;
            end else begin : g_now
                assign cell_d = cell_idx;
            end

            // The cell's place in the bank cycle, registered on the edge that reads the banks: it rotates the
            // basis weights into bank order for the products.
            reg [MW-1:0] cell_mod;
            /* verilator lint_off WIDTHEXPAND */
            /* verilator lint_off WIDTHTRUNC */
            always @(posedge clk) if (ce) cell_mod <= cell_d % K1;
            /* verilator lint_on WIDTHTRUNC */
            /* verilator lint_on WIDTHEXPAND */

            for (j = 0; j < K1; j = j + 1) begin : g_bank
                localparam integer BANK = i * K1 + j;
                /* verilator lint_off WIDTHEXPAND */
                wire bank_hit = w_hit && w_bank == BANK;
                /* verilator lint_on WIDTHEXPAND */
                wire [WORD-1:0] word;
                integer o_w;
                if (RA == 0) begin : g_reg
                    reg [WORD-1:0] bank;
                    initial bank = bank_word(i, j, 0);
                    always @(posedge clk) begin
                        for (o_w = 0; o_w < N_OUT; o_w = o_w + 1)
                            /* verilator lint_off WIDTHEXPAND */
                            if (bank_hit && w_out == o_w) bank[o_w*C_W +: C_W] <= w_code;
                            /* verilator lint_on WIDTHEXPAND */
                    end
                    assign word = bank;
                end else begin : g_mem
                    /* verilator lint_off WIDTHEXPAND */
                    /* verilator lint_off WIDTHTRUNC */
                    wire [RA-1:0] rd_row = cell_d / K1 + (j < cell_d % K1);
                    wire [RA-1:0] wr_row = w_off[RA-1:0];
                    /* verilator lint_on WIDTHTRUNC */
                    /* verilator lint_on WIDTHEXPAND */
                    reg [WORD-1:0] q;
                    integer r_i;
                    if (RAM_STYLE != 0) begin : g_block
                        (* ram_style = "block", no_rw_check *) reg [WORD-1:0] mem [0:(1 << RA)-1];
                        initial for (r_i = 0; r_i < (1 << RA); r_i = r_i + 1) mem[r_i] = bank_word(i, j, r_i);
                        always @(posedge clk) begin
                            for (o_w = 0; o_w < N_OUT; o_w = o_w + 1)
                                /* verilator lint_off WIDTHEXPAND */
                                if (bank_hit && w_out == o_w) mem[wr_row][o_w*C_W +: C_W] <= w_code;
                                /* verilator lint_on WIDTHEXPAND */
                        end
                        always @(posedge clk) if (ce) q <= mem[rd_row];
                    end else begin : g_any
                        (* no_rw_check *) reg [WORD-1:0] mem [0:(1 << RA)-1];
                        initial for (r_i = 0; r_i < (1 << RA); r_i = r_i + 1) mem[r_i] = bank_word(i, j, r_i);
                        always @(posedge clk) begin
                            for (o_w = 0; o_w < N_OUT; o_w = o_w + 1)
                                /* verilator lint_off WIDTHEXPAND */
                                if (bank_hit && w_out == o_w) mem[wr_row][o_w*C_W +: C_W] <= w_code;
                                /* verilator lint_on WIDTHEXPAND */
                        end
                        always @(posedge clk) if (ce) q <= mem[rd_row];
                    end
                    assign word = q;
                end

                // Bank j's coefficient multiplies basis weight m = (j - cell) mod K1.
                /* verilator lint_off WIDTHTRUNC */
                /* verilator lint_off WIDTHEXPAND */
                wire [MW-1:0] m_sel = (j + K1 - cell_mod) % K1;
                /* verilator lint_on WIDTHEXPAND */
                /* verilator lint_on WIDTHTRUNC */
                wire signed [B_W:0] bx = {1'b0, b[m_sel*B_W +: B_W]};
                for (o = 0; o < N_OUT; o = o + 1) begin : g_edge
                    wire [C_W-1:0] coef = word[o*C_W +: C_W];
                    wire signed [C_W:0] cx = (C_SIGNED != 0) ? {coef[C_W-1], coef} : {1'b0, coef};
                    reg signed [P_W-1:0] prod;
                    always @(posedge clk) if (ce) prod <= cx * bx;
                    assign prods[((o*N_IN + i)*(K+1) + j)*P_W +: P_W] = prod;
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
