/** The client version (package.json's; sent in the default connection label). */
export const VERSION = "0.1.0";
