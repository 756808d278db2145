package fallback

// VIPFilterBit exposes vipFilterBit to the external tests.
var VIPFilterBit = vipFilterBit
