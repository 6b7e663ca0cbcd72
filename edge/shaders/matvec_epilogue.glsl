// The end of a matvec column (matvec.comp, matvec_int8.comp): decoding's folds applied to the
// column's summed products, then the store. Included after the shader's Out buffer (`result`),
// its push constants `p` and its FLAG_* names, which both shaders declare alike.
//  - FLAG_NORM: times rsqrt(mean(x²) + eps), rmsnorm.comp's scale of the same sum of squares
//    (`square_total`, over p.k inputs) added in another order;
//  - FLAG_BIAS: plus `bias`;
//  - FLAG_SILU: silu of that, as elementwise.comp's SiLU computes it;
//  - stored at row `row`, column `column` after p.out_offset floats, or (FLAG_ADD) added to
//    what is there, rounded to fp32 first as elementwise.comp's Add adds: the same bits.
void StoreColumn(float total, float square_total, float bias, uint row, uint column) {
  float value = total;
  if ((p.flags & FLAG_NORM) != 0u) value *= inversesqrt(square_total / float(p.k) + p.eps);
  if ((p.flags & FLAG_BIAS) != 0u) value += bias;
  if ((p.flags & FLAG_SILU) != 0u) value = value / (1.0 + exp(-value));
  const uint at = p.out_offset + row * p.n + column;
  result[at] = (p.flags & FLAG_ADD) != 0u ? result[at] + value : value;
}
