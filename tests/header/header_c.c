/* Compiles sluice.h alone as strict C99 (-pedantic -Werror). */
#include "sluice.h"
int sluice_header_c_check(void);
int sluice_header_c_check(void) { return SL_VERSION_NUMBER > 0; }
