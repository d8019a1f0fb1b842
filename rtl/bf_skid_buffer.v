// bf_skid_buffer: a 2-entry valid/ready register slice; in_ready is a register, so the ready path breaks here.
//
// Between two stages the ready signal would otherwise run combinationally through the whole chain (each
// stage's in_ready is its advance = !out_valid || out_ready). Here in_ready only says "the skid entry is
// empty": a sample that arrives while the output is stalled is parked in the skid register, and the output
// takes it first when the stall ends. out_valid and out_data come from a register too. Latency 1, II 1,
// order preserved, nothing dropped or duplicated.
`default_nettype none
module bf_skid_buffer #(
    parameter integer W = 8
) (
    input  wire         clk,
    input  wire         rst,
    input  wire         in_valid,
    output wire         in_ready,
    input  wire [W-1:0] in_data,
    output wire         out_valid,
    input  wire         out_ready,
    output wire [W-1:0] out_data
);
    reg         main_valid, skid_valid;
    reg [W-1:0] main_data, skid_data;

    wire main_free = !main_valid || out_ready;  // the output register is empty or being read this cycle

    always @(posedge clk) begin
        if (rst) begin
            main_valid <= 1'b0;
            skid_valid <= 1'b0;
        end else if (main_free) begin
            main_valid <= skid_valid || in_valid;
            skid_valid <= 1'b0;
        end else if (in_valid && !skid_valid) begin
            skid_valid <= 1'b1;
        end
    end

    always @(posedge clk) begin
        if (main_free) main_data <= skid_valid ? skid_data : in_data;
        if (!main_free && !skid_valid) skid_data <= in_data;
    end

    assign in_ready = !skid_valid;
    assign out_valid = main_valid;
    assign out_data = main_data;
endmodule
`default_nettype wire
