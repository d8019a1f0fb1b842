// bf_cobs_decode: a byte stream of COBS frames (Cheshire and Baker 1999), each ended by 0x00, into the bytes
// of each frame's body, one out per byte in (latency 1).
//
// A code byte c starts a block of c - 1 data bytes; the block stands for its data followed by one zero,
// except after c = 0xFF and except the frame's last block (whose zero is the frame's end). So the zero of a
// block is sent when the next code byte arrives, never at the end: one output byte per input byte at most.
// At the delimiter, end_valid pulses for a frame that had any byte (an empty frame, 0x00 after 0x00, is only a
// resynchronisation and gives nothing) with end_bad set when the last block was cut short (not valid COBS).
// clear drops a partial frame (the frame engine's timeout); partial is high while one is held.
`default_nettype none
module bf_cobs_decode (
    input  wire       clk,
    input  wire       rst,
    input  wire       clear,
    input  wire       s_valid,
    input  wire [7:0] s_data,
    output reg        m_valid,
    output reg  [7:0] m_data,
    output reg        end_valid,
    output reg        end_bad,
    output wire       partial
);
    reg [7:0] left;     // data bytes still to come in the open block
    reg       zero;     // the open block ends in a zero (its code was not 0xFF)
    reg       started;  // a byte arrived since the last delimiter

    assign partial = started;

    always @(posedge clk) begin
        m_valid <= 1'b0;
        end_valid <= 1'b0;
        if (rst || clear) begin
            left <= 8'd0;
            zero <= 1'b0;
            started <= 1'b0;
            end_bad <= 1'b0;
        end else if (s_valid) begin
            if (s_data == 8'h00) begin
                end_valid <= started;
                end_bad <= left != 8'd0;
                started <= 1'b0;
                left <= 8'd0;
                zero <= 1'b0;
            end else if (left == 8'd0) begin  // a code byte: the previous block's zero, if it has one
                m_valid <= started && zero;
                m_data <= 8'h00;
                left <= s_data - 8'd1;
                zero <= s_data != 8'hFF;
                started <= 1'b1;
            end else begin
                m_valid <= 1'b1;
                m_data <= s_data;
                left <= left - 8'd1;
            end
        end
    end
endmodule
`default_nettype wire
