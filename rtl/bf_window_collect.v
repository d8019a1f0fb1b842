// bf_window_collect: P vectors of N elements, one per output position, -> one channels-first tensor.
//
// A window stage (Conv, Pool) computes one output position at a time: all N channels of position p, element
// o at [o*W +: W] of in_data. The tensor it must present holds element (o, p) at flat index o*P + p
// (channels first, C order). Channel o keeps a shift register of P elements; each vector shifts in from the
// top, so after P vectors position 0 sits at the bottom and the register *is* channel o's slice of the
// output: no address logic, no multiplexer, only the P*N*W output bits.
//
// Stream contract of stages.py. The P-th vector completes the tensor and raises out_valid; out_data is held
// until out_ready, and while it is held in_ready is low. The cycle that hands the tensor over also takes the
// next vector (in_ready = !out_valid || out_ready), so vectors arriving one per clock never wait: a stage
// that issues a vector per clock keeps its II of P. Latency 1 from the last vector's handshake; II P.
`default_nettype none
module bf_window_collect #(
    parameter integer N = 2,   // elements per vector (output channels)
    parameter integer W = 8,   // bits per element
    parameter integer P = 4    // vectors per tensor (output positions)
) (
    input  wire             clk,
    input  wire             rst,
    input  wire             in_valid,
    output wire             in_ready,
    input  wire [N*W-1:0]   in_data,
    output wire             out_valid,
    input  wire             out_ready,
    output wire [N*P*W-1:0] out_data
);
    localparam integer CW = P > 1 ? $clog2(P) : 1;
    /* verilator lint_off WIDTHTRUNC */
    localparam [CW-1:0] LAST = P - 1;
    /* verilator lint_on WIDTHTRUNC */

    reg full;
    reg [CW-1:0] count;  // vectors of the tensor being filled
    assign in_ready = !full || out_ready;
    wire take = in_valid && in_ready;
    wire completes = count == LAST;

    always @(posedge clk) begin
        if (rst) begin
            full <= 1'b0;
            count <= {CW{1'b0}};
        end else if (take) begin
            full <= completes;
            count <= completes ? {CW{1'b0}} : count + 1'b1;
        end else if (out_ready) begin
            full <= 1'b0;
        end
    end

    genvar o;
    generate
        for (o = 0; o < N; o = o + 1) begin : g_channel
            reg [P*W-1:0] lane;
            if (P > 1) begin : g_shift
                always @(posedge clk) begin
                    if (take) lane <= {in_data[o*W +: W], lane[P*W-1:W]};
                end
            end else begin : g_load
                always @(posedge clk) begin
                    if (take) lane <= in_data[o*W +: W];
                end
            end
            assign out_data[o*P*W +: P*W] = lane;
        end
    endgenerate
    assign out_valid = full;
endmodule
`default_nettype wire
