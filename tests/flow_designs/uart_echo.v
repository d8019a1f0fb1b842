// A stand-in for the UART device wrapper (<name>_device) with the same ports and parameter: it echoes every
// byte it receives. The board flow builds and tests against it until the real wrapper exists; it is a test
// fixture, not part of bitforge.
//   clk, rst (active-high, synchronous), uart_rx (already synchronised by the board top), uart_tx, busy;
//   CLKS_PER_BIT: clocks per UART bit (8N1, LSB first).
`default_nettype none

module echo_device #(
    parameter integer CLKS_PER_BIT = 104
) (
    input  wire clk,
    input  wire rst,
    input  wire uart_rx,
    output reg  uart_tx,
    output wire busy
);
    localparam integer W = $clog2(CLKS_PER_BIT + 1);

    // Receiver: a falling edge starts a frame; each bit is sampled in its middle.
    reg        rx_active;
    reg [W-1:0] rx_count;
    reg [3:0]  rx_bit;  // 0: start bit, 1-8: data, 9: stop
    reg [7:0]  rx_shift;
    reg        rx_done;
    reg [7:0]  rx_byte;

    always @(posedge clk) begin
        rx_done <= 1'b0;
        if (rst) begin
            rx_active <= 1'b0;
            rx_count <= 0;
            rx_bit <= 0;
            rx_shift <= 8'd0;
            rx_byte <= 8'd0;
        end else if (!rx_active) begin
            if (!uart_rx) begin
                rx_active <= 1'b1;
                rx_count <= CLKS_PER_BIT / 2;
                rx_bit <= 0;
            end
        end else if (rx_count != 0) begin
            rx_count <= rx_count - 1'b1;
        end else begin
            rx_count <= CLKS_PER_BIT - 1;
            rx_bit <= rx_bit + 1'b1;
            if (rx_bit == 0) begin
                if (uart_rx) rx_active <= 1'b0;  // a glitch, not a start bit
            end else if (rx_bit <= 8) begin
                rx_shift <= {uart_rx, rx_shift[7:1]};
            end else begin
                rx_active <= 1'b0;
                if (uart_rx) begin  // a valid stop bit
                    rx_done <= 1'b1;
                    rx_byte <= rx_shift;
                end
            end
        end
    end

    // One byte of buffer: a host sending back to back delivers the next byte while the previous one's stop bit
    // is still going out.
    reg        pending;
    reg [7:0]  pending_byte;
    always @(posedge clk) begin
        if (rst) begin
            pending <= 1'b0;
            pending_byte <= 8'd0;
        end else if (rx_done) begin
            pending <= 1'b1;
            pending_byte <= rx_byte;
        end else if (!tx_active) begin
            pending <= 1'b0;
        end
    end

    // Transmitter: start bit, eight data bits, stop bit.
    reg        tx_active;
    reg [W-1:0] tx_count;
    reg [3:0]  tx_bit;
    reg [9:0]  tx_shift;

    always @(posedge clk) begin
        if (rst) begin
            uart_tx <= 1'b1;
            tx_active <= 1'b0;
            tx_count <= 0;
            tx_bit <= 0;
            tx_shift <= 10'h3ff;
        end else if (!tx_active) begin
            if (pending) begin
                tx_active <= 1'b1;
                tx_shift <= {1'b1, pending_byte, 1'b0};
                tx_count <= CLKS_PER_BIT - 1;
                tx_bit <= 0;
                uart_tx <= 1'b0;
            end
        end else if (tx_count != 0) begin
            tx_count <= tx_count - 1'b1;
        end else if (tx_bit == 9) begin
            tx_active <= 1'b0;
            uart_tx <= 1'b1;
        end else begin
            tx_count <= CLKS_PER_BIT - 1;
            tx_bit <= tx_bit + 1'b1;
            uart_tx <= tx_shift[tx_bit + 1];
        end
    end

    assign busy = rx_active | pending | tx_active;
endmodule

`default_nettype wire
