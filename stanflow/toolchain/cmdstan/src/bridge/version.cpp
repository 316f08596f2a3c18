// The BridgeStan version a library reports, set per build by the makefile
// from the `bridgestan` package that will load it (BRIDGESTAN_VERSION).
#ifndef BS_MAJOR
#error "BS_MAJOR, BS_MINOR and BS_PATCH must be defined"
#endif

extern "C" {
int bs_major_version = BS_MAJOR;
int bs_minor_version = BS_MINOR;
int bs_patch_version = BS_PATCH;
}
