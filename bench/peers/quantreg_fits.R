# quantreg's intervals for the slope of y ~ x on many data sets, in one R process.
#
# Usage: Rscript quantreg_fits.R DATA.csv TAU BOOT_R SEED OUT.csv
#   DATA.csv: columns dataset, x, y (one row per observation).
#   Writes one row per data set: the slope's estimate, its 95% intervals from
#   summary(se = "nid") and summary(se = "boot", R = BOOT_R) (estimate +- t quantile
#   x standard error, on n - 2 degrees of freedom, as summary.rq's t values), and the
#   seconds of rq + nid and of the bootstrap alone. The first line printed is
#   R's and quantreg's versions.
suppressPackageStartupMessages(library(quantreg))
args <- commandArgs(trailingOnly = TRUE)
if (length(args) != 5) stop("usage: Rscript quantreg_fits.R DATA.csv TAU BOOT_R SEED OUT.csv")
data <- read.csv(args[1])
tau <- as.numeric(args[2])
boot_r <- as.integer(args[3])
seed <- as.integer(args[4])
cat(R.version.string, "| quantreg", as.character(packageVersion("quantreg")), "\n")

slope_interval <- function(table, df) {
  est <- table["x", 1]
  se <- table["x", 2]
  est + c(-1, 1) * qt(0.975, df) * se
}

rows <- lapply(split(data, data$dataset), function(d) {
  df <- nrow(d) - 2
  start <- as.numeric(Sys.time())
  fit <- rq(y ~ x, tau = tau, data = d)
  nid <- slope_interval(summary(fit, se = "nid")$coefficients, df)
  mid <- as.numeric(Sys.time())
  set.seed(seed + d$dataset[1])
  boot <- slope_interval(summary(fit, se = "boot", R = boot_r)$coefficients, df)
  end <- as.numeric(Sys.time())
  data.frame(
    dataset = d$dataset[1], slope = coef(fit)[["x"]],
    nid_lower = nid[1], nid_upper = nid[2], boot_lower = boot[1], boot_upper = boot[2],
    seconds_nid = mid - start, seconds_boot = end - mid
  )
})
write.csv(do.call(rbind, rows), args[5], row.names = FALSE)
