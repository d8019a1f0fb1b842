// bf_pool_window: one pooling window of C channels -> C output codes, a stream stage; the per-window core of
// a Pool stage (the generated window sequencer feeds it one window a clock, bf_window_collect gathers them).
//
// in_data: the window, channel c's K taps at [(c*K + k)*IN_W +: IN_W], and TAG_W bits above them: the index of
// the window's reciprocal in RECIPS (MODE 1; unread by MODE 0). Bit-exact with emulate.pool_fixed:
//   MODE 0 (max): y = requantize(max_k x_k) from the input type. Padding taps carry the input type's smallest
//                 code (the sequencer's pad value): every window has a real element, so it never changes the max.
//   MODE 1 (avg): y = requantize(S * R_tag) from IN_FRAC + RECIP_FRAC, S = sum_k x_k exact (padding reads 0),
//                 R_tag = RECIPS[tag*REC_W +: REC_W] = round(2**RECIP_FRAC / n) (emulate.pool_reciprocals),
//                 unsigned. Each distinct reciprocal is a constant multiply (bf_const_mul: shifts and adds, no
//                 DSP block); the tag selects the product; one requantizer per channel.
//
// Pipeline (every register loads on advance = !out_valid || out_ready; in_ready = advance):
//   MODE 0: bf_max_tree (TL = $clog2(K) / LEVELS_PER_STAGE registers), requantize, output register.
//   MODE 1: bf_adder_tree (TL registers), sum register, constant multiplies + select + requantize, output
//           register. The tag waits beside the tree.
// LATENCY = TL + 1 (max) or TL + 2 (avg); II 1.
`default_nettype none
module bf_pool_window #(
    parameter integer C = 1,
    parameter integer K = 4,
    parameter integer IN_W = 8,
    parameter integer IN_FRAC = 0,
    parameter integer IN_SIGNED = 1,
    parameter integer MODE = 0,
    parameter integer TAG_W = 1,
    parameter integer D = 1,           // distinct reciprocals (MODE 1)
    parameter integer REC_W = 16,      // bits of each (unsigned)
    parameter [D*REC_W-1:0] RECIPS = {D*REC_W{1'b0}},
    parameter integer RECIP_FRAC = 16,
    parameter integer OUT_W = 8,
    parameter integer OUT_FRAC = 0,
    parameter integer OUT_SIGNED = 1,
    parameter integer OUT_ROUNDING = 0,
    parameter integer OUT_OVERFLOW = 0,
    parameter integer LEVELS_PER_STAGE = 2
) (
    input  wire                       clk,
    input  wire                       rst,
    input  wire                       in_valid,
    output wire                       in_ready,
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire [C*K*IN_W+TAG_W-1:0]  in_data,  // the tag is unread by max pooling
    /* verilator lint_on UNUSEDSIGNAL */
    output wire                       out_valid,
    input  wire                       out_ready,
    output wire [C*OUT_W-1:0]         out_data
);
    localparam integer TL = $clog2(K) / LEVELS_PER_STAGE;
    localparam integer LATENCY = TL + (MODE == 0 ? 1 : 2);  // the emitter computes the same
    localparam integer S_W = IN_W + $clog2(K);              // exact window sum
    localparam integer P_W = S_W + REC_W;                   // exact sum * reciprocal
    // bf_const_mul recodes its constant on 32-bit Verilog integers: wider reciprocals (RECIP_FRAC > 29) are
    // two constant multiplies, the top bits and the low LO_W bits, added.
    localparam integer LO_W = 15;
    localparam integer SPLIT = REC_W > 30 ? 1 : 0;

    wire advance = !out_valid || out_ready;
    assign in_ready = advance;
    reg [LATENCY-1:0] valid_q;  // one valid bit per pipeline register
    generate
        if (LATENCY > 1) begin : g_valid_pipe
            always @(posedge clk) begin
                if (rst) valid_q <= {LATENCY{1'b0}};
                else if (advance) valid_q <= {valid_q[LATENCY-2:0], in_valid};
            end
        end else begin : g_valid
            always @(posedge clk) begin
                if (rst) valid_q <= 1'b0;
                else if (advance) valid_q <= in_valid;
            end
        end
    endgenerate
    assign out_valid = valid_q[LATENCY-1];

    genvar c, d;
    generate
        if (MODE == 0) begin : g_max
            for (c = 0; c < C; c = c + 1) begin : g_channel
                wire [IN_W-1:0] m;
                bf_max_tree #(.N(K), .W(IN_W), .SIGNED(IN_SIGNED), .LEVELS_PER_STAGE(LEVELS_PER_STAGE))
                    u_tree (.clk(clk), .en(advance), .in_data(in_data[c*K*IN_W +: K*IN_W]), .out_data(m));
                wire [OUT_W-1:0] y;
                bf_requant #(.IN_W(IN_W), .IN_FRAC(IN_FRAC), .IN_SIGNED(IN_SIGNED), .OUT_W(OUT_W),
                             .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED), .OUT_ROUNDING(OUT_ROUNDING),
                             .OUT_OVERFLOW(OUT_OVERFLOW)) u_out (.in_code(m), .out_code(y));
                reg [OUT_W-1:0] y_q;
                always @(posedge clk) begin
                    if (advance) y_q <= y;
                end
                assign out_data[c*OUT_W +: OUT_W] = y_q;
            end
        end else begin : g_avg
            // The tag waits TL cycles beside the tree, then one more beside the sum register.
            wire [TAG_W-1:0] tag_in = in_data[C*K*IN_W +: TAG_W];
            reg [(TL+1)*TAG_W-1:0] tag_q;
            if (TL > 0) begin : g_tag_wait
                always @(posedge clk) begin
                    if (advance) tag_q <= {tag_q[TL*TAG_W-1:0], tag_in};
                end
            end else begin : g_tag
                always @(posedge clk) begin
                    if (advance) tag_q <= tag_in;
                end
            end
            /* verilator lint_off UNUSEDSIGNAL */
            wire [TAG_W-1:0] tag = tag_q[TL*TAG_W +: TAG_W];  // D need not be a power of two
            /* verilator lint_on UNUSEDSIGNAL */
            for (c = 0; c < C; c = c + 1) begin : g_channel
                wire [S_W-1:0] s;
                bf_adder_tree #(.N(K), .IN_W(IN_W), .IN_SIGNED(IN_SIGNED), .LEVELS_PER_STAGE(LEVELS_PER_STAGE))
                    u_tree (.clk(clk), .en(advance), .in_data(in_data[c*K*IN_W +: K*IN_W]), .out_data(s));
                reg [S_W-1:0] s_q;
                always @(posedge clk) begin
                    if (advance) s_q <= s;
                end
                wire [D*P_W-1:0] prods;
                for (d = 0; d < D; d = d + 1) begin : g_recip
                    localparam [REC_W-1:0] R = RECIPS[d*REC_W +: REC_W];
                    if (SPLIT == 0) begin : g_one
                        bf_const_mul #(.A_W(S_W), .A_SIGNED(IN_SIGNED), .C_W(REC_W), .C_SIGNED(0), .C(R))
                            u_mul (.a(s_q), .p(prods[d*P_W +: P_W]));
                    end else begin : g_two
                        localparam integer HI_W = REC_W - LO_W;
                        localparam [HI_W-1:0] RH = R[REC_W-1:LO_W];
                        localparam [LO_W-1:0] RL = R[LO_W-1:0];
                        wire [S_W+HI_W-1:0] ph;
                        wire [S_W+LO_W-1:0] pl;
                        bf_const_mul #(.A_W(S_W), .A_SIGNED(IN_SIGNED), .C_W(HI_W), .C_SIGNED(0), .C(RH))
                            u_hi (.a(s_q), .p(ph));
                        bf_const_mul #(.A_W(S_W), .A_SIGNED(IN_SIGNED), .C_W(LO_W), .C_SIGNED(0), .C(RL))
                            u_lo (.a(s_q), .p(pl));
                        // Both parts are exact; their sum is the product, which fits P_W bits (wrapping adds
                        // are exact for a result that fits).
                        wire [P_W-1:0] plx = IN_SIGNED != 0 ? {{(P_W - S_W - LO_W){pl[S_W+LO_W-1]}}, pl}
                                                            : {{(P_W - S_W - LO_W){1'b0}}, pl};
                        assign prods[d*P_W +: P_W] = {ph, {LO_W{1'b0}}} + plx;
                    end
                end
                reg [P_W-1:0] prod;
                integer j;
                always @* begin
                    prod = prods[0 +: P_W];
                    for (j = 1; j < D; j = j + 1)
                        if (tag == j[TAG_W-1:0]) prod = prods[j*P_W +: P_W];
                end
                wire [OUT_W-1:0] y;
                bf_requant #(.IN_W(P_W), .IN_FRAC(IN_FRAC + RECIP_FRAC), .IN_SIGNED(IN_SIGNED), .OUT_W(OUT_W),
                             .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED), .OUT_ROUNDING(OUT_ROUNDING),
                             .OUT_OVERFLOW(OUT_OVERFLOW)) u_out (.in_code(prod), .out_code(y));
                reg [OUT_W-1:0] y_q;
                always @(posedge clk) begin
                    if (advance) y_q <= y;
                end
                assign out_data[c*OUT_W +: OUT_W] = y_q;
            end
        end
    endgenerate
endmodule
`default_nettype wire
