// Deliberately broken: a missing semicolon, so synthesis must fail with a message that names the log.
module broken_top (
    input  wire clk,
    output reg  q
);
    always @(posedge clk) q <= ~q
endmodule
