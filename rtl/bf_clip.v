// bf_clip: a stream stage computing min(max(x, LO), HI) per element, then requantize (emulate.clip_fixed).
//
// LO and HI are codes of the input's grid (clip_codes: ceil(lo * 2**X_FRAC), floor(hi * 2**X_FRAC)) and may
// lie outside the input type's range, so the comparison runs on V_W-bit signed values wide enough for the
// input and both bounds. max is applied first, then min (when LO > HI on the grid, HI wins, as in the golden
// model). HAS_LO / HAS_HI = 0 leave that side open (the emitter also drops a bound no input code can pass).
// bf_requant then takes the clipped value, at X_FRAC, into the output type. Latency 1, II 1.
`default_nettype none
module bf_clip #(
    parameter integer N = 2,
    parameter integer X_W = 8,
    parameter integer X_FRAC = 0,
    parameter integer X_SIGNED = 1,
    parameter integer V_W = 9,
    parameter integer HAS_LO = 1,
    parameter [V_W-1:0] LO = {V_W{1'b0}},
    parameter integer HAS_HI = 1,
    parameter [V_W-1:0] HI = {{2{1'b0}}, {(V_W-2){1'b1}}},
    parameter integer OUT_W = 8,
    parameter integer OUT_FRAC = 0,
    parameter integer OUT_SIGNED = 1,
    parameter integer OUT_ROUNDING = 0,
    parameter integer OUT_OVERFLOW = 0
) (
    input  wire               clk,
    input  wire               rst,
    input  wire               in_valid,
    output wire               in_ready,
    input  wire [N*X_W-1:0]   in_data,
    output wire               out_valid,
    input  wire               out_ready,
    output wire [N*OUT_W-1:0] out_data
);
    wire ce;
    bf_pipe_valid #(.LATENCY(1)) u_ctrl (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready),
                                         .out_valid(out_valid), .out_ready(out_ready), .ce(ce));
    genvar i;
    generate
        for (i = 0; i < N; i = i + 1) begin : g_elem
            wire [X_W-1:0] x = in_data[i*X_W +: X_W];
            wire signed [V_W-1:0] xs = {{(V_W - X_W){X_SIGNED != 0 ? x[X_W-1] : 1'b0}}, x};
            wire signed [V_W-1:0] above, clipped;
            if (HAS_LO != 0) begin : g_lo
                assign above = xs < $signed(LO) ? $signed(LO) : xs;
            end else begin : g_no_lo
                assign above = xs;
            end
            if (HAS_HI != 0) begin : g_hi
                assign clipped = above > $signed(HI) ? $signed(HI) : above;
            end else begin : g_no_hi
                assign clipped = above;
            end
            wire [OUT_W-1:0] y;
            bf_requant #(
                .IN_W(V_W), .IN_FRAC(X_FRAC), .IN_SIGNED(1),
                .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
                .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW)
            ) u_out (.in_code(clipped), .out_code(y));
            reg [OUT_W-1:0] y_q;
            always @(posedge clk) if (ce) y_q <= y;
            assign out_data[i*OUT_W +: OUT_W] = y_q;
        end
    endgenerate
endmodule
`default_nettype wire
