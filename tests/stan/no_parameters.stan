data {
  real<lower=0> scale;
}
generated quantities {
  real z = normal_rng(0, scale);
}
