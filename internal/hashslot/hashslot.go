// Package hashslot computes Redis Cluster hash slots.
package hashslot

import "strings"

// Of returns the hash slot of key: that of its hash tag, the part between the first '{'
// and the next '}' when that is not empty, else that of the whole key.
func Of(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return Tag(key)
}

// Tag returns the hash slot of every key whose hash tag is tag: its CRC16 (XMODEM) mod
// 16384.
func Tag(tag string) uint16 {
	var crc uint16
	for i := range len(tag) {
		crc = crc<<8 ^ table[byte(crc>>8)^tag[i]]
	}
	return crc % 16384
}

var table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
