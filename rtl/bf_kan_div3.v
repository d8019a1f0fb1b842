// bf_kan_div3: q = floor(t / 3) for an unsigned t, exactly, with shift-adds only (combinational).
//
// floor(t / 3) = (t * M) >> S for every t < 2^S when S is odd and M = (2^S + 1) / 3: then 3M - 2^S = 1, so
// t*M / 2^S = t/3 + t / (3 * 2^S) and the excess (< 1/3) never reaches the next integer. With S = 2n + 1,
// M = 2 (4^n - 1)/3 + 1, and for n = 2^L, (4^n - 1)/3 = (1 + 4)(1 + 16)(1 + 256)...: L shift-adds and one
// more add. Written out so that synthesis builds LUT adders: a constant multiply would take a DSP block,
// and a small iCE40 has only 8 (the basis circuit's u^2, u^3 and the coefficient products need them).
`default_nettype none
module bf_kan_div3 #(
    parameter integer W = 14
) (
    input  wire [W-1:0] t,
    output wire [W-2:0] q   // t / 3 < 2^(W-1)
);
    function integer doublings;  // smallest L with 2 * 2^L + 1 >= W
        input integer width;
        integer l;
        begin
            l = 0;
            while (2 * (1 << l) + 1 < width) l = l + 1;
            doublings = l;
        end
    endfunction

    localparam integer L = doublings(W);
    localparam integer S = 2 * (1 << L) + 1;
    localparam integer PW = W + S;  // t * M < 2^(W + S - 1)

    wire [(L+1)*PW-1:0] y;  // step j at [j*PW +: PW]: t * (4^(2^j) - 1) / 3
    assign y[PW-1:0] = {{S{1'b0}}, t};
    genvar j;
    generate
        for (j = 0; j < L; j = j + 1) begin : g_step
            wire [PW-1:0] prev = y[j*PW +: PW];
            assign y[(j+1)*PW +: PW] = prev + (prev << (2 << j));
        end
    endgenerate
    // verilator lint_off UNUSEDSIGNAL
    wire [PW-1:0] p = (y[L*PW +: PW] << 1) + {{S{1'b0}}, t};  // t * M; the S low bits are dropped (floor)
    // verilator lint_on UNUSEDSIGNAL
    assign q = p[S +: W-1];
endmodule
`default_nettype wire
