// bf_softmax: a stream stage computing the fixed-point softmax of each group of K codes (emulate.softmax_fixed,
// hls4ml's "stable" form with two tables), pipelined, II 1.
//
// in_data holds G groups of K codes (the last axis of a C-order tensor); per group:
//   m   = max_k x_k                                   bf_argmax_tree                     register 1
//   e_k = EXP_TABLE[min((m - x_k) >> EXP_SHIFT, E-1)] one bf_table_rom per element     register 2
//   S   = sum_k e_k, exact                            bf_adder_tree (TL registers, TL = $clog2(K) / LEVELS_PER_STAGE)
//   r   = RECIP_TABLE[clamp((S - RECIP_LO) >> RECIP_SHIFT, 0, R-1)]   bf_table_rom       register 3 + TL
//   y_k = requantize(e_k * r) from E_FRAC + R_FRAC    one bf_mul per element            register 4 + TL
// m - x_k lies in [0, 2**X_W - 1], so its low X_W bits (wrapping arithmetic) are its exact unsigned value.
// e_k waits TL + 1 cycles beside the sum and the reciprocal. Every register loads on bf_pipe_valid's ce.
// Latency 4 + TL, II 1.
`default_nettype none
module bf_softmax #(
    parameter integer G = 1,
    parameter integer K = 4,
    parameter integer X_W = 8,
    parameter integer X_SIGNED = 1,
    parameter integer E_ENTRIES = 4,
    parameter integer E_W = 8,
    parameter integer E_FRAC = 7,
    parameter integer EXP_SHIFT = 0,
    parameter [E_ENTRIES*E_W-1:0] EXP_TABLE = {E_ENTRIES{8'h80}},
    parameter integer R_ENTRIES = 4,
    parameter integer R_W = 8,
    parameter integer R_FRAC = 7,
    parameter integer RLO_W = 8,
    parameter [RLO_W-1:0] RECIP_LO = {RLO_W{1'b0}},
    parameter integer RECIP_SHIFT = 0,
    parameter [R_ENTRIES*R_W-1:0] RECIP_TABLE = {R_ENTRIES{8'h20}},
    parameter integer LEVELS_PER_STAGE = 2,
    parameter integer OUT_W = 8,
    parameter integer OUT_FRAC = 7,
    parameter integer OUT_SIGNED = 0,
    parameter integer OUT_ROUNDING = 0,
    parameter integer OUT_OVERFLOW = 0
) (
    input  wire               clk,
    input  wire               rst,
    input  wire               in_valid,
    output wire               in_ready,
    input  wire [G*K*X_W-1:0] in_data,
    output wire               out_valid,
    input  wire               out_ready,
    output wire [G*K*OUT_W-1:0] out_data
);
    localparam integer TL = $clog2(K) / LEVELS_PER_STAGE;
    localparam integer S_W = E_W + $clog2(K);
    localparam integer DL = TL + 1;  // cycles e_k waits for r

    wire ce;
    bf_pipe_valid #(.LATENCY(4 + TL)) u_ctrl (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready),
                                              .out_valid(out_valid), .out_ready(out_ready), .ce(ce));
    genvar g, k;
    generate
        for (g = 0; g < G; g = g + 1) begin : g_group
            wire [K*X_W-1:0] x = in_data[g*K*X_W +: K*X_W];
            wire [X_W-1:0] m;
            /* verilator lint_off UNUSEDSIGNAL */
            wire [(K > 1 ? $clog2(K) : 1)-1:0] m_index;  // the value is what counts here
            /* verilator lint_on UNUSEDSIGNAL */
            bf_argmax_tree #(.N(K), .W(X_W), .SIGNED(X_SIGNED)) u_max (.in_data(x), .max(m), .index(m_index));
            reg [X_W-1:0] m_q;
            reg [K*X_W-1:0] x_q;
            always @(posedge clk) begin
                if (ce) begin
                    m_q <= m;
                    x_q <= x;
                end
            end

            wire [K*E_W-1:0] e;
            for (k = 0; k < K; k = k + 1) begin : g_exp
                wire [X_W-1:0] d = m_q - x_q[k*X_W +: X_W];
                bf_table_rom #(.X_W(X_W), .X_SIGNED(0), .LO_W(1), .INDEX_LO(1'b0), .SHIFT(EXP_SHIFT),
                               .ENTRIES(E_ENTRIES), .Y_W(E_W), .TABLE(EXP_TABLE))
                    u_exp (.clk(clk), .ce(ce), .x(d), .y(e[k*E_W +: E_W]));
            end

            wire [S_W-1:0] s;
            bf_adder_tree #(.N(K), .IN_W(E_W), .IN_SIGNED(0), .LEVELS_PER_STAGE(LEVELS_PER_STAGE))
                u_sum (.clk(clk), .en(ce), .in_data(e), .out_data(s));
            wire [R_W-1:0] r;
            bf_table_rom #(.X_W(S_W), .X_SIGNED(0), .LO_W(RLO_W), .INDEX_LO(RECIP_LO), .SHIFT(RECIP_SHIFT),
                           .ENTRIES(R_ENTRIES), .Y_W(R_W), .TABLE(RECIP_TABLE))
                u_recip (.clk(clk), .ce(ce), .x(s), .y(r));

            reg [DL*K*E_W-1:0] e_wait;  // oldest on top
            if (DL > 1) begin : g_wait
                always @(posedge clk) if (ce) e_wait <= {e_wait[(DL-1)*K*E_W-1:0], e};
            end else begin : g_wait1
                always @(posedge clk) if (ce) e_wait <= e;
            end
            wire [K*E_W-1:0] e_d = e_wait[DL*K*E_W-1 -: K*E_W];

            for (k = 0; k < K; k = k + 1) begin : g_out
                wire [OUT_W-1:0] y;
                bf_mul #(.A_W(E_W), .A_FRAC(E_FRAC), .A_SIGNED(0), .B_W(R_W), .B_FRAC(R_FRAC), .B_SIGNED(0),
                         .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
                         .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW), .OUT_REG(0))
                    u_mul (.clk(clk), .en(ce), .a(e_d[k*E_W +: E_W]), .b(r), .p(y));
                reg [OUT_W-1:0] y_q;
                always @(posedge clk) if (ce) y_q <= y;
                assign out_data[(g*K + k)*OUT_W +: OUT_W] = y_q;
            end
        end
    endgenerate
endmodule
`default_nettype wire
