// The sum of a (row, head)'s slices of attention_decode.comp, shared by
// attention_decode_combine.comp and attention_decode.comp -DCOMBINE_IN_PLACE so that both add in
// one order and give the same bits. With m the largest slice max,
//   out[d] = Σ_s exp(m_s − m) · acc_s[d] / Σ_s exp(m_s − m) · sum_s,
// the online softmax's rescaling done once over the slices; a slice that held no key has sum 0
// and weighs nothing. The slices are at partials[base + s·(hd + 2)]; invocation tid < hd writes
// result[out_base + tid]. Included after the includer declares partials[] and result[].
void AddSlices(uint base, uint slices, uint hd, uint tid, uint out_base) {
  float largest = -FLT_MAX;
  for (uint s = 0; s < slices; ++s) largest = max(largest, partials[base + s * (hd + 2) + hd]);
  if (tid >= hd) return;
  float total = 0.0, acc = 0.0;
  for (uint s = 0; s < slices; ++s) {
    const uint slice_base = base + s * (hd + 2);
    const float weight = exp(partials[slice_base + hd] - largest);
    total += weight * partials[slice_base + hd + 1];
    acc += weight * partials[slice_base + tid];
  }
  result[out_base + tid] = acc / total;
}
